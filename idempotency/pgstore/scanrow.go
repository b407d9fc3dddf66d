package pgstore

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A claim's row (claimSQL's or readSQL's) is decoded here when the server
// sent it in the formats pgx asks for by default: it is every
// replay's only work on the client besides the round trip, and pgx's own
// Scan plans each column's conversion again for every row of a QueryRow
// (ten plans for a replay, about a fifth of an uncached replay's client
// CPU). Anything else (the text format of the simple protocol, a type a
// custom type map changed, a value out of time.Time's range) goes through
// pgx's Scan, which gives exactly what it always gave:
// TestClaimRowScanIsPgxScan compares both on every shape of record.

// ScanRow implements pgx.RowScanner.
func (r *claimRow) ScanRow(rows pgx.Rows) error {
	dest := r.destFor(len(rows.FieldDescriptions()))
	if defaultTimes(rows) && decodeBinaryRow(rows.FieldDescriptions(), rows.RawValues(), dest) {
		return nil
	}
	return rows.Scan(dest...)
}

// defaultTimes reports whether rows' connection scans timestamptz values
// as pgx does by default (in the local zone): a type map whose codec has
// a ScanLocation gets its times from pgx's Scan.
func defaultTimes(rows pgx.Rows) bool {
	conn := rows.Conn()
	if conn == nil {
		return false
	}
	t, ok := conn.TypeMap().TypeForOID(pgtype.TimestamptzOID)
	if !ok {
		return false
	}
	c, ok := t.Codec.(*pgtype.TimestamptzCodec)
	return ok && c.ScanLocation == nil
}

// destFor returns the destinations of a row of n columns: claimSQL's all,
// readSQL's all but is_new and is_foreign.
func (r *claimRow) destFor(n int) []any {
	dest := r.dest()
	if n == len(dest)-2 {
		return dest[1 : len(dest)-1]
	}
	return dest
}

// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 UTC), and
// the range of time.Time values pgx accepts for a timestamptz.
const pgEpochMicros = 946684800 * 1_000_000

var (
	minScanTime = time.Date(-4713, 11, 24, 0, 0, 0, 0, time.UTC)
	endScanTime = time.Date(294277, 1, 1, 0, 0, 0, 0, time.UTC)
)

// decodeBinaryRow decodes vals into dest when every column is of the type
// its destination expects, in the format pgx asks for by default; otherwise it
// returns false, and the caller scans with pgx (dest may then hold part of
// the row: pgx's Scan overwrites every destination).
func decodeBinaryRow(fds []pgconn.FieldDescription, vals [][]byte, dest []any) bool {
	if len(fds) != len(dest) || len(vals) != len(dest) {
		return false
	}
	for i, fd := range fds {
		// pgx asks for the text format of text and JSON types, whose text
		// is their value (a text type's binary format is the same bytes),
		// and for the binary format of the others.
		v, oid, binFormat := vals[i], fd.DataTypeOID, fd.Format == pgx.BinaryFormatCode
		switch d := dest[i].(type) {
		case *bool:
			if !binFormat || oid != pgtype.BoolOID || len(v) != 1 {
				return false
			}
			*d = v[0] == 1
		case *string:
			if (oid != pgtype.TextOID && oid != pgtype.VarcharOID && oid != pgtype.BPCharOID) || v == nil {
				return false
			}
			*d = internStatus(v)
		case **int32:
			switch {
			case !binFormat || oid != pgtype.Int4OID:
				return false
			case v == nil:
				*d = nil
			case len(v) != 4:
				return false
			default:
				x := int32(binary.BigEndian.Uint32(v))
				*d = &x
			}
		case *int64:
			switch {
			case !binFormat:
				return false
			case oid == pgtype.Int4OID && len(v) == 4: // lock_version is an INT
				*d = int64(int32(binary.BigEndian.Uint32(v)))
			default:
				return false
			}
		case *[]byte:
			switch {
			case v == nil && (oid == pgtype.ByteaOID || oid == pgtype.JSONBOID):
				*d = nil
			case oid == pgtype.ByteaOID && binFormat:
				*d = append(make([]byte, 0, len(v)), v...)
			case oid == pgtype.JSONBOID && !binFormat: // the JSON text
				*d = append(make([]byte, 0, len(v)), v...)
			default:
				return false
			}
		case *time.Time:
			t, ok := decodeTimestamptz(binFormat, oid, v) // false for NULL
			if !ok {
				return false
			}
			*d = t
		case **time.Time:
			if v == nil && oid == pgtype.TimestamptzOID && binFormat {
				*d = nil
				continue
			}
			t, ok := decodeTimestamptz(binFormat, oid, v)
			if !ok {
				return false
			}
			*d = &t
		default:
			return false
		}
	}
	return true
}

// decodeTimestamptz decodes a binary timestamptz as pgx does (time.Unix,
// in the local zone), or reports false for a NULL, infinity or a value
// out of pgx's range (pgx's Scan then gives its own error).
func decodeTimestamptz(binFormat bool, oid uint32, v []byte) (time.Time, bool) {
	if !binFormat || oid != pgtype.TimestamptzOID || len(v) != 8 {
		return time.Time{}, false
	}
	us := int64(binary.BigEndian.Uint64(v))
	if us == 1<<63-1 || us == -1<<63 { // infinity, -infinity
		return time.Time{}, false
	}
	t := time.Unix(pgEpochMicros/1_000_000+us/1_000_000, pgEpochMicros%1_000_000*1_000+us%1_000_000*1_000)
	if t.Before(minScanTime) || !t.Before(endScanTime) {
		return time.Time{}, false
	}
	return t, true
}

// internStatus returns v as a string, without a copy when it is one of the
// statuses a record has (every row holds one).
func internStatus(v []byte) string {
	switch string(v) { // compared without a conversion
	case "COMPLETED":
		return "COMPLETED"
	case "PROCESSING":
		return "PROCESSING"
	case "FAILED":
		return "FAILED"
	}
	return string(v)
}

// versionRow is a new claim's one column, its lock version (an INT),
// decoded as claimRow's are.
type versionRow struct{ v int32 }

// ScanRow implements pgx.RowScanner.
func (r *versionRow) ScanRow(rows pgx.Rows) error {
	fds, vals := rows.FieldDescriptions(), rows.RawValues()
	if len(fds) == 1 && len(vals) == 1 && fds[0].Format == pgx.BinaryFormatCode && fds[0].DataTypeOID == pgtype.Int4OID && len(vals[0]) == 4 {
		r.v = int32(binary.BigEndian.Uint32(vals[0]))
		return nil
	}
	return rows.Scan(&r.v)
}
