package pgstore

import (
	"github.com/jackc/pgx/v5"

	"github.com/payonce/payonce/idempotency"
)

// fencedMember is a group member whose row the group statement updates
// for the holder of its lock version only (a completion, a heartbeat);
// the statement returns the (key, scope) of each row it updated.
type fencedMember interface {
	groupMember
	// fencedRow returns the member's row and its matched flag, set when
	// the group statement updated that row.
	fencedRow() (scopedKey, *bool)
}

// joinFenced runs one fenced statement through g: alone (the caller's own
// statement) when the caller leads g or the group committed nothing for
// it, afterUnknown when the group may or may not have committed it, and
// idempotency.ErrLeaseLost when the group's statement skipped its row
// (another holder's version).
func joinFenced[M fencedMember](g *grouper[M], m M, kind string, alone, afterUnknown func() error) error {
	if g.join(m) {
		defer g.leave()
		return alone()
	}
	if err := g.wait(m); err != nil {
		return translate(kind, err)
	}
	b := m.base()
	_, matched := m.fencedRow()
	switch {
	case b.err != nil:
		return translate(kind, b.err)
	case b.unknown:
		return afterUnknown()
	case b.alone:
		return alone()
	case !*matched:
		return idempotency.ErrLeaseLost
	}
	return nil
}

// flushFenced sends one group of fenced updates: sql with the arguments
// args builds from the members, one per row (a member sharing its row with
// an earlier one runs alone: its own statement sees the earlier one's
// update). Each member whose row the statement returned is matched; a
// group rolled back sends its members alone, one whose commit is unknown
// has them resolve their own rows.
func flushFenced[M fencedMember](s *Store, kind, sql string, batch []M, args func(rows []M) []any) {
	defer func() {
		for _, m := range batch {
			m.base().finish()
		}
	}()
	byKey := make(map[scopedKey]M, len(batch))
	rows := make([]M, 0, len(batch))
	for _, m := range batch {
		k, _ := m.fencedRow()
		if _, dup := byKey[k]; dup {
			m.base().alone = true
			continue
		}
		byKey[k] = m
		rows = append(rows, m)
	}
	var k scopedKey
	outcome, _ := s.sendGroup(batch[0].base().ctx, sql, args(rows), func(r pgx.Rows) error {
		if err := r.Scan(&k.key, &k.scope); err != nil {
			return err
		}
		if m, ok := byKey[k]; ok {
			_, matched := m.fencedRow()
			*matched = true
		}
		return nil
	})
	for _, m := range rows {
		_, matched := m.fencedRow()
		switch outcome {
		case groupRolledBack:
			m.base().alone, *matched = true, false
		case groupUnknown:
			m.base().unknown, *matched = true, false
		}
	}
	s.record(batch[0].base().ctx, kind, len(rows), outcome)
}
