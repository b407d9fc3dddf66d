package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/payonce/payonce/idempotency"
)

// DefaultSkewBuffer is Config.SkewBuffer's default.
const DefaultSkewBuffer = 2 * time.Second

// API is the part of *dynamodb.Client the store calls.
type API interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Config configures a [Store]. A nil *Config gives the defaults; Table
// has none.
type Config struct {
	// Table is the name of the store's table (see [CreateTable]).
	// Required.
	Table string
	// Clock is the store's clock: every lease, expiry and refusal is
	// decided by it, as DynamoDB's expressions have no clock of their
	// own. Default time.Now. Every instance sharing a table must keep its
	// clock within SkewBuffer of the others' (NTP does, by far).
	Clock func() time.Time
	// SkewBuffer is how much the clocks of the instances sharing a table
	// may differ: a lease is taken over only once it ended SkewBuffer ago
	// by the claimant's clock, and DynamoDB's TTL deletes a record
	// SkewBuffer (rounded up to seconds) after it expired. Default
	// DefaultSkewBuffer (2s); negative means none (a single instance, or
	// tests whose one clock is moved by hand).
	SkewBuffer time.Duration
	// Keyring, when set, seals every stored response (headers and body)
	// with AES-256-GCM under its current key, as pgstore's Config.Keyring
	// does. Default nil: responses are stored as they are.
	Keyring *idempotency.Keyring
}

// Store is an [idempotency.Store] on one DynamoDB table. It is safe for
// concurrent use. Create it with [New]; see the package documentation for
// its guarantees.
type Store struct {
	db      API
	table   *string
	clock   func() time.Time
	skew    time.Duration
	keyring *idempotency.Keyring

	mu     sync.Mutex
	cursor map[string]types.AttributeValue // where the next Prune scan resumes

	// hits is an exponentially weighted share, in 1/1024ths, of recent
	// claims that found an existing record: above half, claims read first
	// (see Store.Claim).
	hits atomic.Int64
}

var (
	_ idempotency.Store     = (*Store)(nil)
	_ idempotency.Abandoner = (*Store)(nil)
	_ idempotency.Sealer    = (*Store)(nil)
)

// New returns a Store over the table cfg.Table, which it checks with one
// DescribeTable.
//
// Errors: an *idempotency.InvalidError naming the client when it is nil,
// or Config.Table when cfg is nil, the name empty or the table's key not
// the store's; an error saying how to create the table when it does not
// exist (it wraps *types.ResourceNotFoundException); the client's error,
// wrapped.
func New(ctx context.Context, client API, cfg *Config) (*Store, error) {
	if client == nil {
		return nil, invalidf("client", "nil: give a *dynamodb.Client")
	}
	if cfg == nil || cfg.Table == "" {
		return nil, invalidf("Config.Table", "empty: name the store's table (create it with dynamostore.CreateTable)")
	}
	s := &Store{db: client, table: aws.String(cfg.Table), clock: cfg.Clock, skew: cfg.SkewBuffer, keyring: cfg.Keyring}
	if s.clock == nil {
		s.clock = time.Now
	}
	switch {
	case s.skew == 0:
		s.skew = DefaultSkewBuffer
	case s.skew < 0:
		s.skew = 0
	}
	if err := checkTable(ctx, client, cfg.Table); err != nil {
		return nil, err
	}
	return s, nil
}

// Seals reports whether the store seals responses (Config.Keyring): an
// executor's replay cache then keeps nothing of it.
func (s *Store) Seals() bool { return s.keyring != nil }

// The attributes of a record item, besides pk and purge. Times are Unix
// milliseconds by the store's clock; purge is Unix seconds, DynamoDB's
// TTL unit.
const (
	aScope   = "sc"   // scope
	aKey     = "k"    // idempotency key
	aFP      = "fp"   // fingerprint
	aStatus  = "st"   // PROCESSING, COMPLETED or FAILED
	aVersion = "v"    // lock version, the fencing token
	aLocked  = "lu"   // end of the lease; 0 once released
	aCreated = "ca"   // created at
	aDone    = "co"   // completed at
	aExpires = "ea"   // expires at
	aRefuse  = "rf"   // refusal horizon past ea (ms), 0 under ExpiredIsNew
	aRefuseS = "rfs"  // the same in whole seconds, rounded up, for purge
	aUntil   = "ru"   // refuse until: set on tombstones only
	aCode    = "code" // the response
	aHeader  = "hdr"  // (JSON)
	aBody    = "body"
	aOwners  = "scs" // on an owners item: the scopes that claimed the key with RefuseForeign
)

// Every attribute is named through a placeholder: some short names are
// DynamoDB reserved words.
var names = func() map[string]string {
	m := map[string]string{}
	for _, a := range []string{attrPK, attrPurge, aScope, aKey, aFP, aStatus, aVersion, aLocked, aCreated, aDone,
		aExpires, aRefuse, aRefuseS, aUntil, aCode, aHeader, aBody, aOwners} {
		m["#"+a] = a
	}
	return m
}()

// namesFor is the placeholders an expression uses: DynamoDB refuses
// unused ones.
func namesFor(attrs ...string) map[string]string {
	m := make(map[string]string, len(attrs))
	for _, a := range attrs {
		m["#"+a] = names["#"+a]
	}
	return m
}

// recordPK is a record's partition key. '#' is in neither a scope's nor
// a key's charset, so no two (scope, key) pairs share one.
func recordPK(scope, key string) string { return "r#" + scope + "#" + key }
func ownersPK(key string) string        { return "o#" + key }

// newVersion is the lock version of a new record: random below 2^30, as
// pgstore's, so that a key deleted (pruned, or by TTL) and claimed again
// does not hand out the fencing token of a holder that stalled since.
func newVersion() int64 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint32(b[:]) >> 2)
}

// item is a record as read from the table.
type item struct {
	scope, key, fp, status    string
	v, lu, ca, co, ea, rf, ru int64
	hasRU                     bool
	code                      int64
	hdr, body                 []byte
}

func decodeItem(m map[string]types.AttributeValue) item {
	it := item{scope: str(m[aScope]), key: str(m[aKey]), fp: str(m[aFP]), status: str(m[aStatus]),
		v: num(m[aVersion]), lu: num(m[aLocked]), ca: num(m[aCreated]), co: num(m[aDone]), ea: num(m[aExpires]),
		rf: num(m[aRefuse]), ru: num(m[aUntil]), code: num(m[aCode]), hdr: bin(m[aHeader]), body: bin(m[aBody])}
	_, it.hasRU = m[aUntil]
	return it
}

func str(a types.AttributeValue) string {
	if s, ok := a.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func num(a types.AttributeValue) int64 {
	if n, ok := a.(*types.AttributeValueMemberN); ok {
		v, _ := strconv.ParseInt(n.Value, 10, 64)
		return v
	}
	return 0
}

func bin(a types.AttributeValue) []byte {
	if b, ok := a.(*types.AttributeValueMemberB); ok {
		return b.Value
	}
	return nil
}

func avS(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }
func avN(n int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
}
func avB(b []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: b} }
func keyOf(pk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: avS(pk)}
}

func (s *Store) nowMs() int64 { return s.clock().UnixMilli() }

// purgeAt is the TTL (Unix seconds) for an instant in ms: the instant plus
// the skew buffer, rounded up. DynamoDB deletes the item some time after
// it (typically within days), never before.
func (s *Store) purgeAt(ms int64) int64 {
	return (ms+s.skew.Milliseconds()+999)/1000 + 1
}

// Claim implements [idempotency.Store.Claim], decided by the store's clock
// on the item as DynamoDB holds it:
//
//   - absent: created PROCESSING (ClaimAcquired) at a random lock version
//     by a PutItem conditioned on attribute_not_exists(pk): one round trip.
//   - COMPLETED or FAILED and expired, or a tombstone: per p.Expired,
//     replaced by a new PROCESSING record at the next lock version
//     (ClaimAcquired) by a PutItem conditioned on the version and status
//     read, or refused (ClaimExpired).
//   - another fingerprint: ClaimMismatch, nothing changed or returned.
//   - COMPLETED or FAILED: ClaimReplay with the record and its response.
//   - PROCESSING with a lease that ended less than Config.SkewBuffer ago,
//     or not yet: ClaimInProgress, RetryAfter until then.
//   - PROCESSING with a lease that ended before: ClaimReclaimed at the
//     next version, by an UpdateItem conditioned on the status, the
//     version and the lease end read (a compare-and-swap: of many
//     contenders exactly one wins; a heartbeat in between makes it fail).
//
// The first step adapts to the traffic, as pgstore's default
// ClaimAdaptive strategy does: while most recent claims are of new keys
// (the usual traffic) the claim puts first, and a key that exists costs a
// consistent GetItem after the failed PutItem (billed as a write); while
// most find an existing record (a retry storm, a replaying client) it
// reads first with a consistent GetItem, so that a replay costs one read
// and a new key a read more. A write whose condition fails because
// another writer came first is decided again on a fresh read. Every
// strategy gives the same answers; they differ in cost only.
//
// With p.RefuseForeign, a key this scope has no record of is first looked
// up among the scopes that claimed it with RefuseForeign (see the package
// documentation, Scopes).
//
// Errors: an *idempotency.InvalidError naming the bad field of p; the
// client's error, wrapped. On error nothing changed, or the claim's
// outcome is unknown to the caller (a lost reply).
func (s *Store) Claim(ctx context.Context, p idempotency.ClaimParams) (idempotency.Claim, error) {
	if err := p.Validate(); err != nil {
		return idempotency.Claim{}, err
	}
	var known *item // the record as last read, not yet decided on
	observed := p.RefuseForeign || s.readFirst()
	if observed {
		it, found, err := s.read(ctx, p.Scope, p.Key)
		if err != nil {
			return idempotency.Claim{}, err
		}
		s.observe(found)
		if found {
			known = &it
		} else if p.RefuseForeign {
			if foreign, err := s.foreign(ctx, p); err != nil || foreign {
				return idempotency.Claim{State: idempotency.ClaimForeign}, err
			}
		}
	}
	// Each pass ends in an answer or in a write that lost to another
	// writer; every loss means the record moved on, so a few passes do.
	for range 16 {
		if known == nil {
			v := newVersion()
			err := s.put(ctx, p, s.nowMs(), v, "attribute_not_exists(#pk)", nil, namesFor(attrPK))
			if !observed && (err == nil || conditionFailed(err)) {
				s.observe(err != nil)
				observed = true
			}
			if err == nil {
				return idempotency.Claim{State: idempotency.ClaimAcquired, Lease: idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: v}}, nil
			}
			if !conditionFailed(err) {
				return idempotency.Claim{}, s.wrap("claim", p.Key, err)
			}
			it, found, err := s.read(ctx, p.Scope, p.Key)
			if err != nil {
				return idempotency.Claim{}, err
			}
			if !found {
				continue // deleted since: create it
			}
			known = &it
		}
		c, done, err := s.decide(ctx, p, *known, s.nowMs())
		if err != nil || done {
			return c, err
		}
		known = nil
	}
	return idempotency.Claim{}, fmt.Errorf("dynamostore: claim of key %s: the record kept changing under 16 attempts", idempotency.ShortHash(p.Key))
}

// readFirst says whether the next claim reads first: while most recent
// claims found an existing record.
func (s *Store) readFirst() bool { return s.hits.Load() > 512 }

// observe folds whether a claim found an existing record into the hit
// share (weight 1/16). Lost updates under concurrency only blur an
// estimate.
func (s *Store) observe(found bool) {
	h := s.hits.Load()
	var x int64
	if found {
		x = 1024
	}
	s.hits.Store(h + (x-h)/16)
}

// decide answers a claim of the existing record it; done is false when a
// conditional write lost to another writer and the claim must start over.
func (s *Store) decide(ctx context.Context, p idempotency.ClaimParams, it item, now int64) (idempotency.Claim, bool, error) {
	lease := func(v int64) idempotency.Lease { return idempotency.Lease{Scope: p.Scope, Key: p.Key, Version: v} }
	if it.status != string(idempotency.StatusProcessing) && (it.ea <= now || it.hasRU) {
		// Expired, or a tombstone: never replayed, whatever the fingerprint.
		if p.Expired == idempotency.ExpiredRefused {
			return idempotency.Claim{State: idempotency.ClaimExpired}, true, nil
		}
		// The version keeps growing: a lease of the old record never fits.
		err := s.put(ctx, p, now, it.v+1, "#v = :v AND #st = :st",
			map[string]types.AttributeValue{":v": avN(it.v), ":st": avS(it.status)}, namesFor(aVersion, aStatus))
		if conditionFailed(err) {
			return idempotency.Claim{}, false, nil
		}
		if err != nil {
			return idempotency.Claim{}, true, s.wrap("claim", p.Key, err)
		}
		return idempotency.Claim{State: idempotency.ClaimAcquired, Lease: lease(it.v + 1)}, true, nil
	}
	if !idempotency.Fingerprint(it.fp).Equal(p.Fingerprint) {
		return idempotency.Claim{State: idempotency.ClaimMismatch}, true, nil
	}
	if it.status != string(idempotency.StatusProcessing) {
		rec, err := s.record(p.Scope, p.Key, it)
		if err != nil {
			return idempotency.Claim{}, true, err
		}
		return idempotency.Claim{State: idempotency.ClaimReplay, Record: rec, StoreNow: time.UnixMilli(now)}, true, nil
	}
	if held := it.lu + s.skew.Milliseconds(); it.lu != 0 && held > now {
		rec := idempotency.Record{Scope: p.Scope, Key: p.Key, Status: idempotency.StatusProcessing, LockVersion: it.v,
			LockedUntil: fromMs(it.lu), CreatedAt: fromMs(it.ca), ExpiresAt: fromMs(it.ea)}
		return idempotency.Claim{State: idempotency.ClaimInProgress, Record: rec,
			RetryAfter: time.Duration(held-now) * time.Millisecond}, true, nil
	}
	// Orphaned or released: take it over with the next version, if nobody
	// moved it since the read (another reclaim changes v, a heartbeat lu).
	lu := now + p.LockTimeout.Milliseconds()
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                s.table,
		Key:                      keyOf(recordPK(p.Scope, p.Key)),
		UpdateExpression:         aws.String("SET #v = :nv, #lu = :lu, #purge = :purge"),
		ConditionExpression:      aws.String("#st = :processing AND #v = :v AND #lu = :seen"),
		ExpressionAttributeNames: namesFor(aVersion, aLocked, attrPurge, aStatus),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":nv": avN(it.v + 1), ":lu": avN(lu), ":purge": avN(s.purgeAt(max(it.ea, lu))),
			":processing": avS(string(idempotency.StatusProcessing)), ":v": avN(it.v), ":seen": avN(it.lu)},
	})
	if conditionFailed(err) {
		return idempotency.Claim{}, false, nil
	}
	if err != nil {
		return idempotency.Claim{}, true, s.wrap("claim", p.Key, err)
	}
	return idempotency.Claim{State: idempotency.ClaimReclaimed, Lease: lease(it.v + 1)}, true, nil
}

// put writes a new PROCESSING record at version v under the condition
// cond.
func (s *Store) put(ctx context.Context, p idempotency.ClaimParams, now, v int64, cond string,
	values map[string]types.AttributeValue, condNames map[string]string) error {
	rf := p.RefuseFor().Milliseconds()
	ea := now + p.Retention.Milliseconds()
	lu := now + p.LockTimeout.Milliseconds()
	in := &dynamodb.PutItemInput{
		TableName: s.table,
		Item: map[string]types.AttributeValue{
			attrPK: avS(recordPK(p.Scope, p.Key)), aScope: avS(p.Scope), aKey: avS(p.Key),
			aFP: avS(string(p.Fingerprint)), aStatus: avS(string(idempotency.StatusProcessing)),
			aVersion: avN(v), aLocked: avN(lu), aCreated: avN(now), aExpires: avN(ea),
			aRefuse: avN(rf), aRefuseS: avN((rf + 999) / 1000),
			attrPurge: avN(s.purgeAt(max(ea, lu))),
		},
		ConditionExpression:       aws.String(cond),
		ExpressionAttributeNames:  condNames,
		ExpressionAttributeValues: values,
	}
	_, err := s.db.PutItem(ctx, in)
	return err
}
