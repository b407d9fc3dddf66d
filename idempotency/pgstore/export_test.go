package pgstore

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
)

// GroupedRows returns how many rows group statements committed (tests
// prove with it that groups formed).
func (s *Store) GroupedRows() int64 { return s.groupedRows.Load() }

// SetGroupFlights sets how many group statements of a kind may be in
// flight at once, however many connections the pool has: callers beyond n
// wait for the next group.
func (s *Store) SetGroupFlights(n int) {
	s.claims.maxFlights, s.completions.maxFlights, s.heartbeats.maxFlights = n, n, n
	s.claims.conns, s.completions.conns, s.heartbeats.conns = 0, 0, 0
}

// SetGroupStall sets how long a queued caller waits for a flight before it
// starts one more.
func (s *Store) SetGroupStall(d time.Duration) {
	s.claims.stall, s.completions.stall, s.heartbeats.stall = d, d, d
}

// Queued returns how many callers wait for the next group of kind
// ("claim", "complete" or "heartbeat").
func (s *Store) Queued(kind string) int {
	switch kind {
	case "claim":
		s.claims.mu.Lock()
		defer s.claims.mu.Unlock()
		return len(s.claims.queue)
	case "heartbeat":
		s.heartbeats.mu.Lock()
		defer s.heartbeats.mu.Unlock()
		return len(s.heartbeats.queue)
	}
	s.completions.mu.Lock()
	defer s.completions.mu.Unlock()
	return len(s.completions.queue)
}

// EncodeResponse is encodeResponse, for tests that compare it with
// json.Marshal.
func EncodeResponse(r idempotency.Response) ([]byte, error) { return encodeResponse(r) }

// ResponseMetaJSON is what encodeResponse must match byte for byte.
func ResponseMetaJSON(h http.Header) ([]byte, error) { return json.Marshal(responseMeta{Header: h}) }

// ScanClaimRowBothWays scans the current row of rows (claimSQL's or
// readSQL's) into a claim row twice: by the store's own binary decoding
// and by pgx's Scan. decoded reports whether the store's decoding took the
// row (false: ScanRow hands it to pgx).
func ScanClaimRowBothWays(rows pgx.Rows) (own, viaPgx any, decoded bool, err error) {
	var a, b claimRow
	n := len(rows.FieldDescriptions())
	decoded = defaultTimes(rows) && decodeBinaryRow(rows.FieldDescriptions(), rows.RawValues(), a.destFor(n))
	err = rows.Scan(b.destFor(n)...)
	return a, b, decoded, err
}

// ScanVersion scans a new claim's row (its lock version) as the store
// does.
func ScanVersion(row pgx.Row) (int32, error) {
	var v versionRow
	err := row.Scan(&v)
	return v.v, err
}
