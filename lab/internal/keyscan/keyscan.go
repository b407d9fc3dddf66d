// Package keyscan looks for full idempotency keys where none may be: log
// records, error texts and spans carry only idempotency.ShortHash(key).
// The demo's storm and torture (cmd/payonce) check with it everything
// their processes log, answer and trace; tests check a scenario's.
//
// Worker processes write their records and spans as JSON lines to a file
// of their own (see [Sink]), which the driver scans with
// [Checker.ScanFile]; a process scans its own records, spans and the error
// texts it receives as they come ([Checker.Handler],
// [Checker.SpanProcessor], [Checker.Scan]).
package keyscan

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/payonce/payonce/idempotency"
)

// Set is a set of keys to look for. A key is found wherever it occurs in
// a text, also inside a longer string: a composed key
// "<scope>_<action>_<intent>", a saga's sub-key "<key>_<step>" and a
// provider key "<key>_<step>_<attempt>" all contain the client's key.
// Safe for concurrent use.
type Set struct {
	mu      sync.RWMutex
	keys    map[string]struct{}
	lengths []int     // the distinct lengths of keys, ascending
	first   [256]bool // the first bytes of keys
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{keys: map[string]struct{}{}} }

// Add adds keys; empty ones are ignored.
func (s *Set) Add(keys ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if k == "" {
			continue
		}
		if _, ok := s.keys[k]; ok {
			continue
		}
		s.keys[k] = struct{}{}
		s.first[k[0]] = true
		if i := sort.SearchInts(s.lengths, len(k)); i == len(s.lengths) || s.lengths[i] != len(k) {
			s.lengths = append(s.lengths, 0)
			copy(s.lengths[i+1:], s.lengths[i:])
			s.lengths[i] = len(k)
		}
	}
}

// Len returns how many keys the set holds.
func (s *Set) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.keys)
}

// Find returns a key of the set that text contains, the longest one at
// the first position where one starts.
func (s *Set) Find(text string) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i, n := s.findLocked(text)
	if i < 0 {
		return "", false
	}
	return text[i : i+n], true
}

// findLocked returns the position and length of the first (longest) key
// in text, or -1. One map probe per position and key length: linear in
// the text whatever the number of keys.
func (s *Set) findLocked(text string) (int, int) {
	for i := 0; i < len(text); i++ {
		if !s.first[text[i]] {
			continue
		}
		for j := len(s.lengths) - 1; j >= 0; j-- {
			n := s.lengths[j]
			if i+n > len(text) {
				continue
			}
			if _, ok := s.keys[text[i:i+n]]; ok {
				return i, n
			}
		}
	}
	return -1, 0
}

// Redact returns text with every key of the set replaced by
// "key#<ShortHash(key)>", so that a finding can be shown without
// repeating the key.
func (s *Set) Redact(text string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var b strings.Builder
	for {
		i, n := s.findLocked(text)
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		b.WriteString(text[:i])
		b.WriteString("key#" + idempotency.ShortHash(text[i:i+n]))
		text = text[i+n:]
	}
}

// Kind is what a scanned text is.
type Kind int

const (
	// Record is a log record.
	Record Kind = iota
	// Span is a span: its name, status, attributes and events.
	Span
	// ErrorText is an error's text: an HTTP error answer, a reconciler's
	// finding or failure, a reason stored for a human.
	ErrorText
)

// Leak is a text that held a full key, redacted.
type Leak struct {
	Kind Kind
	// Where says which process or answer it came from.
	Where string
	// Text is the text, each key in it replaced by its short hash.
	Text string
}

// Checker scans texts for the keys of its Set and keeps what it found.
// Safe for concurrent use.
type Checker struct {
	Keys *Set

	mu      sync.Mutex
	scanned [3]int
	leaks   []Leak
}

// NewChecker returns a Checker looking for keys.
func NewChecker(keys *Set) *Checker { return &Checker{Keys: keys} }

// Scan checks one text of kind, from where.
func (c *Checker) Scan(kind Kind, where, text string) {
	_, found := c.Keys.Find(text)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scanned[kind]++
	if found {
		c.leaks = append(c.leaks, Leak{Kind: kind, Where: where, Text: c.Keys.Redact(text)})
	}
}

// Scanned returns how many log records, spans and error texts were
// scanned.
func (c *Checker) Scanned() (records, spans, errorTexts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scanned[Record], c.scanned[Span], c.scanned[ErrorText]
}

// Leaks returns the texts that held a key, in the order found.
func (c *Checker) Leaks() []Leak {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Leak(nil), c.leaks...)
}

// ScanFile scans a file a [Sink] wrote: each line is a log record, or a
// span when it starts with {"span":. A line cut short by a killed
// process is scanned as it is.
func (c *Checker) ScanFile(path, where string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadString('\n')
		if line = strings.TrimSuffix(line, "\n"); line != "" {
			kind := Record
			if strings.HasPrefix(line, spanPrefix) {
				kind = Span
			}
			c.Scan(kind, where, line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Handler returns a slog handler that scans every record from where, at
// every level, as JSON (its attributes and groups included), and passes
// it on to next (nil: none) when next is enabled for its level.
func (c *Checker) Handler(where string, next slog.Handler) slog.Handler {
	scan := slog.NewJSONHandler(scanWriter{c, Record, where}, &slog.HandlerOptions{Level: slog.LevelDebug})
	if next == nil {
		return scan
	}
	return slog.NewMultiHandler(scan, next)
}

// SpanProcessor returns a span processor that scans every span from
// where that ends.
func (c *Checker) SpanProcessor(where string) sdktrace.SpanProcessor {
	return &spanProcessor{w: scanWriter{c, Span, where}}
}

// scanWriter scans each Write as one text: slog's JSON handler writes one
// record per call, the span processor one span.
type scanWriter struct {
	c     *Checker
	kind  Kind
	where string
}

func (w scanWriter) Write(p []byte) (int, error) {
	w.c.Scan(w.kind, w.where, string(bytes.TrimSuffix(p, []byte("\n"))))
	return len(p), nil
}

// Sink is where a worker process writes everything it logs and traces
// for the driver to scan: one JSON line per record or span.
type Sink struct {
	f *os.File
	// Logger logs every record, at every level, to the file, and those at
	// Error and above to the worker's stderr too.
	Logger *slog.Logger
	// TracerProvider samples every span and writes it to the file.
	TracerProvider *sdktrace.TracerProvider
}

// OpenSink creates path (appending) and returns the logger and tracer
// provider writing to it; stderr receives the records at Error and above
// as text, as the worker logs without a sink.
func OpenSink(path string, stderr io.Writer) (*Sink, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// Every line is one write: a killed process leaves whole lines, but
	// perhaps its last one.
	h := slog.NewMultiHandler(
		slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}),
		slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(&spanProcessor{w: f}))
	return &Sink{f: f, Logger: slog.New(h), TracerProvider: tp}, nil
}

// Close flushes the spans and closes the file.
func (s *Sink) Close() error {
	err := s.TracerProvider.Shutdown(context.Background())
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// spanPrefix starts every span line.
const spanPrefix = `{"span":`

// spanLine is what a span carries that a key could leak into.
type spanLine struct {
	Span       string         `json:"span"`
	Status     string         `json:"status,omitempty"`
	Attributes map[string]any `json:"attributes,omitempty"`
	Events     []spanEvent    `json:"events,omitempty"`
	Links      []spanEvent    `json:"links,omitempty"`
}

type spanEvent struct {
	Name       string         `json:"name,omitempty"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// spanProcessor writes each ended span as one JSON line.
type spanProcessor struct {
	mu sync.Mutex
	w  io.Writer
}

func attrs(kvs []attribute.KeyValue) map[string]any {
	if len(kvs) == 0 {
		return nil
	}
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

func (p *spanProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

func (p *spanProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	line := spanLine{Span: s.Name(), Status: s.Status().Description, Attributes: attrs(s.Attributes())}
	for _, e := range s.Events() {
		line.Events = append(line.Events, spanEvent{Name: e.Name, Attributes: attrs(e.Attributes)})
	}
	for _, l := range s.Links() {
		line.Links = append(line.Links, spanEvent{Attributes: attrs(l.Attributes)})
	}
	b, err := json.Marshal(line)
	if err != nil {
		b, _ = json.Marshal(spanLine{Span: s.Name(), Status: fmt.Sprintf("(not encodable: %v)", err)})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = p.w.Write(append(b, '\n'))
}

func (p *spanProcessor) Shutdown(context.Context) error   { return nil }
func (p *spanProcessor) ForceFlush(context.Context) error { return nil }
