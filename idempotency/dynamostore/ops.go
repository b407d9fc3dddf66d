package dynamostore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/payonce/payonce/idempotency"
)

// read is a strongly consistent GetItem of (scope, key)'s record.
func (s *Store) read(ctx context.Context, scope, key string) (item, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: s.table, Key: keyOf(recordPK(scope, key)),
		ConsistentRead: aws.Bool(true)})
	if err != nil {
		return item{}, false, s.wrap("read", key, err)
	}
	if len(out.Item) == 0 {
		return item{}, false, nil
	}
	return decodeItem(out.Item), true, nil
}

// record is the idempotency.Record of it, its response opened when sealed.
func (s *Store) record(scope, key string, it item) (idempotency.Record, error) {
	rec := idempotency.Record{Scope: scope, Key: key, Fingerprint: idempotency.Fingerprint(it.fp),
		Status: idempotency.Status(it.status), LockVersion: it.v, CreatedAt: fromMs(it.ca),
		CompletedAt: fromMs(it.co), ExpiresAt: fromMs(it.ea)}
	if rec.Status == idempotency.StatusProcessing {
		rec.LockedUntil = fromMs(it.lu)
		return rec, nil
	}
	if it.hasRU {
		rec.RefuseUntil = fromMs(it.ru)
		return rec, nil
	}
	r := idempotency.Response{Code: int(it.code), Body: it.body}
	if len(it.hdr) > 0 {
		if err := json.Unmarshal(it.hdr, &r.Header); err != nil {
			return idempotency.Record{}, fmt.Errorf("dynamostore: stored response headers of key %s are not valid: %w", idempotency.ShortHash(key), err)
		}
	}
	if s.keyring != nil {
		var err error
		if r, err = s.keyring.Open(scope, key, rec.Status, r); err != nil {
			return idempotency.Record{}, err
		}
	}
	rec.Response = &r
	return rec, nil
}

// foreign reports whether a scope other than p.Scope holds a live record
// of p.Key, among those that claimed it with RefuseForeign; when none
// does, it files p.Scope among them, for at least twice p.Retention.
func (s *Store) foreign(ctx context.Context, p idempotency.ClaimParams) (bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: s.table, Key: keyOf(ownersPK(p.Key)),
		ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, s.wrap("claim", p.Key, err)
	}
	if ss, ok := out.Item[aOwners].(*types.AttributeValueMemberSS); ok {
		now := s.nowMs()
		for _, other := range ss.Value {
			if other == p.Scope {
				continue
			}
			it, found, err := s.read(ctx, other, p.Key)
			if err != nil {
				return false, err
			}
			live := found && (it.status == string(idempotency.StatusProcessing) || !it.hasRU && it.ea > now)
			if live {
				return true, nil
			}
		}
	}
	purge := s.purgeAt(s.nowMs() + 2*p.Retention.Milliseconds())
	upd, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 s.table,
		Key:                       keyOf(ownersPK(p.Key)),
		UpdateExpression:          aws.String("ADD #scs :scope SET #purge = if_not_exists(#purge, :purge)"),
		ExpressionAttributeNames:  namesFor(aOwners, attrPurge),
		ExpressionAttributeValues: map[string]types.AttributeValue{":scope": &types.AttributeValueMemberSS{Value: []string{p.Scope}}, ":purge": avN(purge)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		return false, s.wrap("claim", p.Key, err)
	}
	if num(upd.Attributes[attrPurge]) < purge {
		// Only ever lengthened: another scope's longer retention stays.
		_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 s.table,
			Key:                       keyOf(ownersPK(p.Key)),
			UpdateExpression:          aws.String("SET #purge = :purge"),
			ConditionExpression:       aws.String("#purge < :purge"),
			ExpressionAttributeNames:  namesFor(attrPurge),
			ExpressionAttributeValues: map[string]types.AttributeValue{":purge": avN(purge)},
		})
		if err != nil && !conditionFailed(err) {
			return false, s.wrap("claim", p.Key, err)
		}
	}
	return false, nil
}

// holds is the fencing guard of complete, release, heartbeat and abandon:
// the record is PROCESSING at the lease's lock version.
const holds = "#st = :processing AND #v = :v"

func holdsValues(l idempotency.Lease) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{":processing": avS(string(idempotency.StatusProcessing)), ":v": avN(l.Version)}
}

// Complete implements [idempotency.Store.Complete]: one UpdateItem
// conditioned on the status and the lock version. The lease need not be
// live: a holder whose lease ran out may complete as long as nobody took
// the record over, which the lock version tells.
//
// Errors: idempotency.ErrLeaseLost when the record is absent, not
// PROCESSING or at another lock version; an *idempotency.InvalidError
// naming Completion.Status, Completion.Retention or Completion.Response (a
// response that would make the item larger than DynamoDB's 400 KB,
// refused before it is sent); the client's error, wrapped. On error
// nothing changed, or (a lost reply) the outcome is unknown to the
// caller.
func (s *Store) Complete(ctx context.Context, l idempotency.Lease, c idempotency.Completion) error {
	if c.Status != idempotency.StatusCompleted && c.Status != idempotency.StatusFailed {
		return invalidf("Completion.Status", "must be COMPLETED or FAILED, got %q", c.Status)
	}
	if c.Retention <= 0 {
		return invalidf("Completion.Retention", "must be positive, got %s", c.Retention)
	}
	resp := c.Response
	if s.keyring != nil {
		sealed, err := s.keyring.Seal(l.Scope, l.Key, c.Status, resp)
		if err != nil {
			return err
		}
		resp = sealed
	}
	now := s.nowMs()
	ea := now + c.Retention.Milliseconds()
	values := holdsValues(l)
	values[":st"] = avS(string(c.Status))
	values[":code"] = avN(int64(resp.Code))
	values[":co"] = avN(now)
	values[":ea"] = avN(ea)
	values[":zero"] = avN(0)
	values[":purge"] = avN(s.purgeAt(ea))
	set := "SET #st = :st, #code = :code, #co = :co, #ea = :ea, #lu = :zero, #purge = :purge + #rfs"
	remove := ""
	attrs := []string{aStatus, aVersion, aCode, aDone, aExpires, aLocked, attrPurge, aRefuseS}
	if len(resp.Header) > 0 {
		hdr, err := json.Marshal(resp.Header)
		if err != nil {
			return invalidf("Response.Header", "%v", err)
		}
		values[":hdr"] = avB(hdr)
		set += ", #hdr = :hdr"
	} else {
		remove = " REMOVE #hdr"
	}
	attrs = append(attrs, aHeader)
	if len(resp.Body) > 0 {
		values[":body"] = avB(resp.Body)
		set += ", #body = :body"
	} else if remove == "" {
		remove = " REMOVE #body"
	} else {
		remove += ", #body"
	}
	attrs = append(attrs, aBody)
	if n := itemSize(l, resp, values[":hdr"]); n > maxItemBytes {
		return invalidf("Completion.Response", "the record would take %d bytes, over DynamoDB's item limit of %d: store a smaller response (headers and body)", n, maxItemBytes)
	}
	_, err := s.fenced(ctx, "complete", l, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String(set + remove),
		ExpressionAttributeNames:  namesFor(attrs...),
		ExpressionAttributeValues: values,
	})
	return err
}

// maxItemBytes is DynamoDB's limit on an item's size, names and values.
const maxItemBytes = 400 * 1024

// itemSize is an upper bound of the size of l's record holding resp: its
// key, scope and response, and 400 bytes for the other attributes
// (names, fingerprint, numbers).
func itemSize(l idempotency.Lease, resp idempotency.Response, hdr types.AttributeValue) int {
	return 400 + len(recordPK(l.Scope, l.Key)) + len(l.Scope) + len(l.Key) + len(bin(hdr)) + len(resp.Body)
}

// Release implements [idempotency.Store.Release]: the lease ends now
// (locked until 0), and the record stays PROCESSING; the next claim takes
// it over at once, the skew buffer notwithstanding, since its holder
// said it is done.
//
// Errors: idempotency.ErrLeaseLost as for [Store.Complete]; the client's
// error, wrapped.
func (s *Store) Release(ctx context.Context, l idempotency.Lease) error {
	values := holdsValues(l)
	values[":zero"] = avN(0)
	_, err := s.fenced(ctx, "release", l, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #lu = :zero"),
		ExpressionAttributeNames:  namesFor(aStatus, aVersion, aLocked),
		ExpressionAttributeValues: values,
	})
	return err
}

// Heartbeat implements [idempotency.Store.Heartbeat]: the lease ends d
// from now, by the store's clock. A lease that outlasts the record's
// expiry also moves its TTL (a second UpdateItem).
//
// Errors: as for [Store.Release], and an *idempotency.InvalidError naming
// d when it is not positive.
func (s *Store) Heartbeat(ctx context.Context, l idempotency.Lease, d time.Duration) error {
	if d <= 0 {
		return invalidf("d", "heartbeat extension must be positive, got %s", d)
	}
	lu := s.nowMs() + d.Milliseconds()
	values := holdsValues(l)
	values[":lu"] = avN(lu)
	in := &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #lu = :lu"),
		ExpressionAttributeNames:  namesFor(aStatus, aVersion, aLocked),
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	}
	after, err := s.fenced(ctx, "heartbeat", l, in)
	if err != nil || num(after[attrPurge]) >= s.purgeAt(lu) {
		return err
	}
	values = holdsValues(l)
	values[":purge"] = avN(s.purgeAt(lu))
	_, err = s.fenced(ctx, "heartbeat", l, &dynamodb.UpdateItemInput{
		UpdateExpression:          aws.String("SET #purge = :purge"),
		ExpressionAttributeNames:  namesFor(aStatus, aVersion, attrPurge),
		ExpressionAttributeValues: values,
	})
	return err
}

// Abandon implements [idempotency.Abandoner]: the PROCESSING record held
// by l is deleted, as if never claimed.
//
// Errors: as for [Store.Release].
func (s *Store) Abandon(ctx context.Context, l idempotency.Lease) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 s.table,
		Key:                       keyOf(recordPK(l.Scope, l.Key)),
		ConditionExpression:       aws.String(holds),
		ExpressionAttributeNames:  namesFor(aStatus, aVersion),
		ExpressionAttributeValues: holdsValues(l),
	})
	if conditionFailed(err) {
		return idempotency.ErrLeaseLost
	}
	if err != nil {
		return s.wrap("abandon", l.Key, err)
	}
	return nil
}

// fenced runs in, an UpdateItem of l's record, under the fencing guard
// (holds): the item's attributes after it when in asks for them, or
// idempotency.ErrLeaseLost when the guard fails.
func (s *Store) fenced(ctx context.Context, op string, l idempotency.Lease, in *dynamodb.UpdateItemInput) (map[string]types.AttributeValue, error) {
	in.TableName = s.table
	in.Key = keyOf(recordPK(l.Scope, l.Key))
	in.ConditionExpression = aws.String(holds)
	out, err := s.db.UpdateItem(ctx, in)
	if conditionFailed(err) {
		return nil, idempotency.ErrLeaseLost
	}
	if err != nil {
		return nil, s.wrap(op, l.Key, err)
	}
	return out.Attributes, nil
}

// Get implements [idempotency.Store.Get]: one strongly consistent
// GetItem. An expired record not yet pruned (nor deleted by TTL) is
// returned as it is; its ExpiresAt tells. A tombstone has RefuseUntil set
// and no Response.
//
// Errors: idempotency.ErrNotFound; idempotency.ErrUndecryptable (wrapped)
// for a sealed response the keyring cannot open; the client's error,
// wrapped.
func (s *Store) Get(ctx context.Context, scope, key string) (idempotency.Record, error) {
	it, found, err := s.read(ctx, scope, key)
	if err != nil {
		return idempotency.Record{}, err
	}
	if !found {
		return idempotency.Record{}, idempotency.ErrNotFound
	}
	return s.record(scope, key, it)
}

// pruneFilter selects the records Prune takes: finished and expired (not
// yet a tombstone), or tombstones whose refusal has ended.
const pruneFilter = "#st <> :processing AND ((attribute_not_exists(#ru) AND #ea <= :now) OR #ru <= :now)"

// Prune implements [idempotency.Store.Prune] with a Scan of the table
// filtered by pruneFilter, and one conditional write per record taken: a
// DeleteItem, or for a record claimed under ExpiredRefused whose refusal
// horizon has not passed an UpdateItem that reduces it to a tombstone
// (its response removed, refuse-until set). Each write is conditioned on
// the version, status and expiry read, so a record renewed meanwhile is
// left alone (and not counted).
//
// A Scan reads every item of the table, expired or not, and DynamoDB
// bills the bytes read, not the items returned. The store reads pages of
// limit items (25 to 1,000) and resumes each call where the previous one
// stopped (in this process), so that a Pruner's pass does not read the
// table again for each batch; a call that finds fewer than limit has
// gone round the whole table, so a pass reads it about twice at most.
//
// Errors: an *idempotency.InvalidError when limit is not positive; the
// client's error, wrapped.
func (s *Store) Prune(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, invalidf("limit", "must be positive, got %d", limit)
	}
	s.mu.Lock()
	start := s.cursor
	s.mu.Unlock()
	next, wrapped, total := start, start == nil, 0
	var last string // the partition key of the last item taken or passed over
	save := func(c map[string]types.AttributeValue) {
		s.mu.Lock()
		s.cursor = c
		s.mu.Unlock()
	}
	for {
		now := s.nowMs()
		out, err := s.db.Scan(ctx, &dynamodb.ScanInput{
			TableName:                s.table,
			ExclusiveStartKey:        next,
			Limit:                    aws.Int32(int32(min(max(limit, 25), 1000))),
			FilterExpression:         aws.String(pruneFilter),
			ExpressionAttributeNames: namesFor(aStatus, aUntil, aExpires),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":processing": avS(string(idempotency.StatusProcessing)), ":now": avN(now)},
		})
		if err != nil {
			return total, s.wrap("prune", "", err)
		}
		for _, m := range out.Items {
			if total == limit {
				// On after the last item looked at, which this one is not.
				save(keyOf(last))
				return total, nil
			}
			last = str(m[attrPK])
			took, err := s.pruneOne(ctx, decodeItem(m), last, now)
			if err != nil {
				return total, err
			}
			if took {
				total++
			}
		}
		next = out.LastEvaluatedKey
		if total == limit {
			save(next)
			return total, nil
		}
		if next == nil {
			if wrapped {
				save(nil)
				return total, nil
			}
			wrapped = true // on from the table's start, to where this call began
		}
	}
}

// pruneOne deletes or tombstones one record found by Prune's scan; took
// is false when the record changed since.
func (s *Store) pruneOne(ctx context.Context, it item, pk string, now int64) (bool, error) {
	values := map[string]types.AttributeValue{":v": avN(it.v), ":st": avS(it.status), ":ea": avN(it.ea)}
	cond := "#v = :v AND #st = :st AND #ea = :ea"
	var err error
	switch {
	case it.hasRU:
		values[":ru"] = avN(it.ru)
		_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: s.table, Key: keyOf(pk),
			ConditionExpression:      aws.String(cond + " AND #ru = :ru"),
			ExpressionAttributeNames: namesFor(aVersion, aStatus, aExpires, aUntil), ExpressionAttributeValues: values})
	case it.ea+it.rf > now:
		values[":ru"] = avN(it.ea + it.rf)
		_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.table, Key: keyOf(pk),
			UpdateExpression:          aws.String("SET #ru = :ru REMOVE #code, #hdr, #body"),
			ConditionExpression:       aws.String(cond + " AND attribute_not_exists(#ru)"),
			ExpressionAttributeNames:  namesFor(aVersion, aStatus, aExpires, aUntil, aCode, aHeader, aBody),
			ExpressionAttributeValues: values})
	default:
		_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: s.table, Key: keyOf(pk),
			ConditionExpression:      aws.String(cond + " AND attribute_not_exists(#ru)"),
			ExpressionAttributeNames: namesFor(aVersion, aStatus, aExpires, aUntil), ExpressionAttributeValues: values})
	}
	if conditionFailed(err) {
		return false, nil
	}
	if err != nil {
		return false, s.wrap("prune", it.key, err)
	}
	return true, nil
}

func conditionFailed(err error) bool {
	var cf *types.ConditionalCheckFailedException
	return errors.As(err, &cf)
}

// wrap names the operation and a short hash of the key, never the key.
func (s *Store) wrap(op, key string, err error) error {
	if key == "" {
		return fmt.Errorf("dynamostore: %s: %w", op, err)
	}
	return fmt.Errorf("dynamostore: %s of key %s: %w", op, idempotency.ShortHash(key), err)
}

func invalidf(field, format string, args ...any) error {
	return &idempotency.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func fromMs(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}
