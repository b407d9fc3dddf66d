package idempotency

import (
	"bytes"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// ReplayCache configures an executor's in-process cache of finished
// records ([Config].ReplayCache), which answers replays without a round
// trip to the store.
//
// A finished record (COMPLETED or FAILED) never changes until it expires:
// Complete applies only under a live claim's lock version, a prune deletes
// only expired records, and a renewal replaces only an expired one. So a
// replay the store answered once may be answered again from memory, until
// the record's expiry. The cache keeps that promise conservatively:
//
//   - an entry is stored only from a replay the store answered, with the
//     record's remaining life measured on the store's clock (the
//     database's for pgstore) at the read, and counted down on this
//     process's clock from before the read was sent; it is served only
//     until Margin before that end (and never after the wall clock says
//     so either, in case this process was suspended);
//   - the request's fingerprint is compared with the entry's in constant
//     time: another fingerprint answers ErrFingerprintMismatch, as the
//     store would for an unexpired record;
//   - entries are per (scope, key): a scope never sees another's;
//   - a store that seals responses (pgstore's Config.Keyring, [Encrypted])
//     is never cached: plaintext responses are not kept in memory;
//   - a request with [Request].NoCache (a route's opt-out) goes to the
//     store, and neither reads nor fills the cache.
//
// Records in progress, expired, or missing are never cached: every claim
// of a new key, a reclaim, an in-progress answer goes to the store.
type ReplayCache struct {
	// Size bounds how many finished records are kept; the least recently
	// used is evicted. Default 10,000.
	Size int
	// Margin is how long before a record's expiry its entry stops being
	// served: it absorbs the drift between this process's clock rate and
	// the store's. Default 1s; must not be negative.
	Margin time.Duration
	// Clock is this process's clock, counting an entry's life down.
	// Default time.Now. Tests that move the store's clock move this one
	// with it.
	Clock func() time.Time
}

// Sealer is implemented by stores that may seal stored responses; the
// replay cache keeps nothing of a store whose Seals reports true.
type Sealer interface {
	Seals() bool
}

func (c *ReplayCache) withDefaults() (ReplayCache, error) {
	out := *c
	switch {
	case out.Size < 0:
		return out, invalid("Config.ReplayCache.Size", "must not be negative, got %d", out.Size)
	case out.Margin < 0:
		return out, invalid("Config.ReplayCache.Margin", "must not be negative, got %s", out.Margin)
	}
	if out.Size == 0 {
		out.Size = 10_000
	}
	if out.Margin == 0 {
		out.Margin = time.Second
	}
	if out.Clock == nil {
		out.Clock = time.Now
	}
	return out, nil
}

type cacheKey struct{ scope, key string }

// cached is one finished record as a replay answered it.
type cached struct {
	fp     Fingerprint
	status Status
	resp   Response
	// until is when the entry stops being served, on the monotonic clock
	// (a time with a monotonic reading) and on the wall clock.
	until, untilWall time.Time
}

type replayCache struct {
	cfg ReplayCache
	lru *lru.Cache[cacheKey, *cached]
}

func newReplayCache(cfg ReplayCache) (*replayCache, error) {
	l, err := lru.New[cacheKey, *cached](cfg.Size)
	if err != nil {
		return nil, invalid("Config.ReplayCache.Size", "%v", err)
	}
	return &replayCache{cfg: cfg, lru: l}, nil
}

// get answers req from the cache: a finished record's outcome, or
// ErrFingerprintMismatch. ok is false when the cache holds nothing live
// for req's (scope, key).
func (c *replayCache) get(req Request) (claim Claim, ok bool) {
	k := cacheKey{req.Scope, req.Key}
	e, found := c.lru.Get(k)
	if !found {
		return Claim{}, false
	}
	now := c.cfg.Clock()
	if !now.Before(e.until) || !now.Round(0).Before(e.untilWall) {
		c.lru.Remove(k)
		return Claim{}, false
	}
	if !e.fp.Equal(req.Fingerprint) {
		return Claim{State: ClaimMismatch}, true
	}
	resp := cloneResponse(e.resp)
	return Claim{State: ClaimReplay, Record: Record{Scope: req.Scope, Key: req.Key, Fingerprint: e.fp,
		Status: e.status, Response: &resp}}, true
}

// put keeps the record of a replay the store answered; sent is this
// process's clock when the claim was sent.
func (c *replayCache) put(req Request, claim Claim, sent time.Time) {
	rec := claim.Record
	if claim.State != ClaimReplay || rec.Response == nil || claim.StoreNow.IsZero() || rec.ExpiresAt.IsZero() {
		return
	}
	life := rec.ExpiresAt.Sub(claim.StoreNow) - c.cfg.Margin
	if life <= 0 {
		return
	}
	c.lru.Add(cacheKey{req.Scope, req.Key}, &cached{fp: req.Fingerprint, status: rec.Status,
		resp: cloneResponse(*rec.Response), until: sent.Add(life), untilWall: sent.Round(0).Add(life)})
}

// cloneResponse copies r, so that neither the caller nor the cache sees
// the other's changes.
func cloneResponse(r Response) Response {
	return Response{Code: r.Code, Header: r.Header.Clone(), Body: bytes.Clone(r.Body)}
}
