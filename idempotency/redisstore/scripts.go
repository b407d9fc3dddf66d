package redisstore

import "github.com/redis/go-redis/v9"

// The scripts redisstore runs. Each state change is one script, run
// atomically by the server: no other command runs between its read and its
// write, so a decision and its effect are one step, and the
// compare-and-swap of a reclaim needs no second round trip.
//
// Every instant comes from the server's clock (TIME, in milliseconds),
// never from the application's: the arguments carry durations only. Redis
// 7 replicates a script's effects (the commands it ran, with their
// values), not the script, so a replica stores the primary's instants.
//
// A record is a hash (KEYS[1], "<prefix>:{<scope>}:r:<key>") with the
// fields
//
//	fp    fingerprint
//	st    PROCESSING, COMPLETED or FAILED
//	v     lock version (the fencing token)
//	lu    end of the lease (ms), PROCESSING only
//	ca    created at (ms)
//	co    completed at (ms), finished records only
//	ea    expires at (ms)
//	rf    refusal horizon past ea (ms), 0 under ExpiredIsNew
//	ru    refuse until (ms), tombstones only
//	code, hdr, body   the response, finished records only (hdr: JSON)
//
// The key itself expires (PEXPIREAT) when nothing can need it any more: a
// PROCESSING record at max(ea, lu), a finished one at ea + rf. The scope's
// due index (KEYS[2], "<prefix>:{<scope>}:due", a sorted set of keys by
// the instant the prune next takes them: ea, or ru for a tombstone) lets
// Prune find expired records without scanning; the prune registry
// ("<prefix>:prune", scopes by their earliest due instant) lets it find
// the scopes. Every script touches the keys of one scope only, so of one
// Cluster slot; the registry, in a slot of its own, is written by
// commands of its own (see Store.Complete and Store.Prune).
//
// Fingerprints are compared byte by byte over their whole length (XOR,
// OR-accumulated: sameLua), so that the time taken does not depend on
// where they differ, as Fingerprint.Equal's crypto/subtle comparison.

// nowLua is the prelude of every script that decides on time.
const nowLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// sameLua compares two strings in time that depends on their length only.
const sameLua = `
local function same(a, b)
  if #a ~= #b then return false end
  local d = 0
  for i = 1, #a do d = bit.bor(d, bit.bxor(string.byte(a, i), string.byte(b, i))) end
  return d == 0
end
`

// claimScript claims ARGV[1] (the key) in KEYS[1]. It answers one of
//
//	{'acquired', v}  {'reclaimed', v}  {'mismatch'}  {'expired'}
//	{'inprogress', v, ms left on the lease}
//	{'replay', status, code, hdr, body, v, ea, now}
//	{'absent'}  (only with ARGV[8] = 'check': nothing written)
//
// ARGV: 1 key, 2 fingerprint, 3 lock timeout (ms), 4 retention (ms),
// 5 refusal horizon (ms, 0 for none), 6 'refuse' under ExpiredRefused,
// 7 the lock version of a new record, 8 'check' to report an absent key
// instead of creating it.
var claimScript = redis.NewScript(nowLua + sameLua + `
local rec, due = KEYS[1], KEYS[2]
local lock, ret, rf = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local f = redis.call('HMGET', rec, 'fp', 'st', 'v', 'lu', 'ea', 'ru', 'code', 'hdr', 'body')
local fp, st = f[1], f[2]

local function create(v)
  redis.call('DEL', rec)
  redis.call('HSET', rec, 'fp', ARGV[2], 'st', 'PROCESSING', 'v', v,
    'lu', now + lock, 'ca', now, 'ea', now + ret, 'rf', rf)
  redis.call('PEXPIREAT', rec, now + ret)
  redis.call('ZREM', due, ARGV[1])
  return {'acquired', v}
end

if not st then
  if ARGV[8] == 'check' then return {'absent'} end
  return create(tonumber(ARGV[7]))
end
local v, ea = tonumber(f[3]), tonumber(f[5])
if st ~= 'PROCESSING' and (ea <= now or f[6]) then
  -- Expired, or a tombstone: never replayed, whatever the fingerprint.
  if ARGV[6] == 'refuse' then return {'expired'} end
  -- The version keeps growing: a lease of the old record never fits.
  return create(v + 1)
end
if not same(fp, ARGV[2]) then return {'mismatch'} end
if st ~= 'PROCESSING' then
  return {'replay', st, f[7], f[8], f[9], v, ea, now}
end
local lu = tonumber(f[4] or 0)
if lu > now then return {'inprogress', v, lu - now} end
-- Orphaned or released: take it over with the next version. The read
-- and this write are one step, so exactly one contender gets here.
redis.call('HSET', rec, 'v', v + 1, 'lu', now + lock)
redis.call('PEXPIREAT', rec, math.max(ea, now + lock))
return {'reclaimed', v + 1}
`)

// holdsLua is the fencing guard of complete, release, heartbeat and
// abandon: the record is PROCESSING at the caller's lock version (ARGV[1]).
const holdsLua = `
local rec = KEYS[1]
local h = redis.call('HMGET', rec, 'st', 'v', 'ea', 'rf')
if h[1] ~= 'PROCESSING' or tonumber(h[2]) ~= tonumber(ARGV[1]) then return 0 end
`

// completeScript stores the outcome for the holder of version ARGV[1] and
// returns the record's expiry (ea, ms), or 0 for a lost lease (nothing
// changed). A record already finished at version ARGV[1] with the status
// ARGV[2] was finished by this holder: the script answers its expiry
// again (a retry after a lost reply, or after a write not acknowledged by
// enough replicas, is not a lost lease), and rewrites its status so that
// a WAIT that follows counts the replicas that have the outcome. ARGV:
// 2 status, 3 code, 4 hdr, 5 body, 6 retention (ms), 7 key.
//
// The caller files the scope in the prune registry (ZADD LT, by ea): the
// registry is in a slot of its own.
var completeScript = redis.NewScript(nowLua + `
local rec = KEYS[1]
local h = redis.call('HMGET', rec, 'st', 'v', 'ea', 'rf')
if tonumber(h[2]) ~= tonumber(ARGV[1]) then return 0 end
if h[1] == ARGV[2] then
  redis.call('HSET', rec, 'st', h[1])
  return tonumber(h[3])
end
if h[1] ~= 'PROCESSING' then return 0 end
local ea, rf = now + tonumber(ARGV[6]), tonumber(h[4] or 0)
redis.call('HSET', rec, 'st', ARGV[2], 'code', ARGV[3], 'hdr', ARGV[4], 'body', ARGV[5],
  'co', now, 'ea', ea)
redis.call('HDEL', rec, 'lu')
redis.call('PEXPIREAT', rec, ea + rf)
redis.call('ZADD', KEYS[2], ea, ARGV[7])
local exp = redis.call('PEXPIRETIME', KEYS[2])
if exp < ea + rf then redis.call('PEXPIREAT', KEYS[2], ea + rf) end
return ea
`)

// releaseScript ends the lease of version ARGV[1] now: 1, or 0.
var releaseScript = redis.NewScript(nowLua + holdsLua + `
redis.call('HSET', rec, 'lu', now)
return 1
`)

// heartbeatScript extends the lease of version ARGV[1] to ARGV[2] ms from
// now: 1, or 0.
var heartbeatScript = redis.NewScript(nowLua + holdsLua + `
local lu = now + tonumber(ARGV[2])
redis.call('HSET', rec, 'lu', lu)
redis.call('PEXPIREAT', rec, math.max(tonumber(h[3]), lu))
return 1
`)

// abandonScript deletes the PROCESSING record of version ARGV[1]: 1, or 0.
var abandonScript = redis.NewScript(holdsLua + `
redis.call('DEL', rec)
return 1
`)

// pruneScopeScript takes at most ARGV[2] records of one scope that are due
// (KEYS[1], the scope's due index) and returns how many it took: an
// expired record is deleted, or reduced to a tombstone (its response
// deleted, ru set) while its refusal horizon has not passed; a tombstone
// past it is deleted. Members whose record Redis already expired are
// dropped without counting. It returns {taken, the index's earliest
// instant or false when empty}: the caller files the scope in the prune
// registry at that instant, or takes it out (the registry is in a slot of
// its own).
//
// The records' keys are ARGV[1] .. member: not in KEYS, but in the same
// slot as KEYS[1] by their hash tag, {<scope>}.
var pruneScopeScript = redis.NewScript(nowLua + `
local due, limit, n = KEYS[1], tonumber(ARGV[2]), 0
while n < limit do
  local batch = redis.call('ZRANGE', due, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit - n)
  if #batch == 0 then break end
  for _, k in ipairs(batch) do
    local rec = ARGV[1] .. k
    local f = redis.call('HMGET', rec, 'st', 'ea', 'rf', 'ru')
    local ea, rf = tonumber(f[2]), tonumber(f[3] or 0)
    if not f[1] or f[1] == 'PROCESSING' then
      redis.call('ZREM', due, k)
    elseif f[4] then
      redis.call('DEL', rec)
      redis.call('ZREM', due, k)
      n = n + 1
    elseif ea > now then
      redis.call('ZADD', due, ea, k)
    elseif ea + rf > now then
      redis.call('HDEL', rec, 'code', 'hdr', 'body')
      redis.call('HSET', rec, 'ru', ea + rf)
      redis.call('ZADD', due, ea + rf, k)
      n = n + 1
    else
      redis.call('DEL', rec)
      redis.call('ZREM', due, k)
      n = n + 1
    end
  end
end
local next = redis.call('ZRANGE', due, 0, 0, 'WITHSCORES')
if #next == 0 then return {n, false} end
return {n, next[2]}
`)

// dueScopeScript returns a scope of the prune registry (KEYS[1]) that has
// records due, or false.
var dueScopeScript = redis.NewScript(nowLua + `
local s = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, 1)
return s[1] or false
`)

// liveScript reports whether the record KEYS[1] is live (PROCESSING, or not
// expired): 1 or 0.
var liveScript = redis.NewScript(nowLua + `
local f = redis.call('HMGET', KEYS[1], 'st', 'ea', 'ru')
if not f[1] then return 0 end
if f[1] == 'PROCESSING' then return 1 end
if f[3] or tonumber(f[2]) <= now then return 0 end
return 1
`)

// ownScript files scope ARGV[1] among the owners of a key (KEYS[1], a set)
// and keeps the set at least ARGV[2] ms from now.
var ownScript = redis.NewScript(nowLua + `
redis.call('SADD', KEYS[1], ARGV[1])
local exp = now + tonumber(ARGV[2])
if redis.call('PEXPIRETIME', KEYS[1]) < exp then redis.call('PEXPIREAT', KEYS[1], exp) end
return 1
`)
