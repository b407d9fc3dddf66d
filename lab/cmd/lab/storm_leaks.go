package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/payonce/payonce/lab/internal/keyscan"
	"github.com/payonce/payonce/reconcile"
)

// leakCheck is the storm's and the torture's check that no log record,
// error text or span holds a full idempotency key (only
// idempotency.ShortHash of one): every key their clients send is looked
// for in
//   - every record the workers log, at every level, and every span they
//     trace (PAYONCE_DEMO_LOG_DIR: the workers write them to files);
//   - every record the driver's own payonce components (the reconcilers)
//     log and every span they trace, and what the log package prints;
//   - every error answer the clients receive (the whole body of a 4xx or
//     5xx, the "error", "reason" and "detail" fields of any other), and
//     what the reconcilers report (failures, findings);
//   - the texts payonce stored for humans: review reasons, reconciler
//     findings and failures, webhook details, saga reasons and step
//     errors.
type leakCheck struct {
	*keyscan.Checker
	dir string
	tp  *sdktrace.TracerProvider
	// logger logs every record for the check, and those at Error and
	// above to stderr.
	logger *slog.Logger
}

// newLeakCheck starts the check: a directory for the workers' files, a
// logger and a tracer provider for the driver's components.
func newLeakCheck(keys *keyscan.Set) (*leakCheck, error) {
	dir, err := os.MkdirTemp("", "payonce-demo-logs-")
	if err != nil {
		return nil, err
	}
	c := keyscan.NewChecker(keys)
	l := &leakCheck{Checker: c, dir: dir,
		tp:     sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(c.SpanProcessor("the demo's span"))),
		logger: slog.New(c.Handler("the demo's log", slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))}
	return l, nil
}

// setDefault makes the check's logger slog's default, for what logs
// through it (the log package's output too).
func (l *leakCheck) setDefault() { slog.SetDefault(l.logger) }

// workerEnv is the workers' variable that makes them write their records
// and spans where the check reads them.
func (l *leakCheck) workerEnv() string { return "PAYONCE_DEMO_LOG_DIR=" + l.dir }

// close removes the workers' files.
func (l *leakCheck) close() {
	_ = l.tp.Shutdown(context.Background())
	_ = os.RemoveAll(l.dir)
}

// transport scans the error answers that pass through rt.
func (l *leakCheck) transport(rt http.RoundTripper) http.RoundTripper {
	return answerScanner{l: l, rt: rt}
}

type answerScanner struct {
	l  *leakCheck
	rt http.RoundTripper
}

// CloseIdleConnections closes rt's idle connections (http.Client's
// CloseIdleConnections reaches them through it).
func (a answerScanner) CloseIdleConnections() {
	if c, ok := a.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (a answerScanner) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	where := fmt.Sprintf("answer %d to %s %s", resp.StatusCode, req.Method, req.URL.Path)
	// The path holds the key (GET /checkout/{key}): show it redacted.
	where = a.l.Keys.Redact(where)
	if resp.StatusCode >= 400 {
		a.l.Scan(keyscan.ErrorText, where, string(body))
		return resp, nil
	}
	// A success answer may name its own key ("key"); its error texts may
	// not.
	var v any
	if json.Unmarshal(body, &v) == nil {
		errorFields(v, func(text string) { a.l.Scan(keyscan.ErrorText, where, text) })
	}
	return resp, nil
}

// errorFields calls f with every non-empty "error", "reason" and "detail"
// string in v, at any depth.
func errorFields(v any, f func(string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && s != "" && (k == "error" || k == "reason" || k == "detail") {
				f(s)
				continue
			}
			errorFields(x, f)
		}
	case []any:
		for _, x := range v {
			errorFields(x, f)
		}
	}
}

// report scans what a reconciler run reported: its failure and its
// findings' details.
func (l *leakCheck) report(where string, rep *reconcile.Report, err error) {
	if err != nil {
		l.Scan(keyscan.ErrorText, where, err.Error())
	}
	if rep == nil {
		return
	}
	if rep.Error != "" {
		l.Scan(keyscan.ErrorText, where, rep.Error)
	}
	for _, x := range rep.Items {
		l.Scan(keyscan.ErrorText, where, x.Detail)
	}
}

// storedTexts are the texts payonce keeps for humans.
const storedTexts = `
SELECT 'payment_intents.review_reason', review_reason FROM payment_intents WHERE review_reason IS NOT NULL
UNION ALL SELECT 'reconcile_runs.error', error FROM reconcile_runs WHERE error IS NOT NULL
UNION ALL SELECT 'reconcile_items.detail', detail FROM reconcile_items WHERE detail <> ''
UNION ALL SELECT 'webhook_events.detail', detail FROM webhook_events WHERE detail <> ''
UNION ALL SELECT 'sagas.reason', reason FROM sagas WHERE reason IS NOT NULL
UNION ALL SELECT 'saga_steps.error', error FROM saga_steps WHERE error IS NOT NULL`

// finish scans the workers' files and the stored texts, and returns the
// summary's figure and a problem per text that held a key.
func (l *leakCheck) finish(ctx context.Context, pool *pgxpool.Pool) (figure string, problems []string, err error) {
	_ = l.tp.ForceFlush(ctx)
	files, err := filepath.Glob(filepath.Join(l.dir, "*.jsonl"))
	if err != nil {
		return "", nil, err
	}
	for _, f := range files {
		pid := strings.TrimPrefix(strings.TrimSuffix(filepath.Base(f), ".jsonl"), "worker-")
		if err := l.ScanFile(f, "worker pid "+pid); err != nil {
			return "", nil, err
		}
	}
	rows, err := pool.Query(ctx, storedTexts)
	if err != nil {
		return "", nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var where, text string
		if err := rows.Scan(&where, &text); err != nil {
			return "", nil, err
		}
		l.Scan(keyscan.ErrorText, "stored "+where, text)
	}
	if err := rows.Err(); err != nil {
		return "", nil, err
	}
	records, spans, texts := l.Scanned()
	leaks := l.Leaks()
	figure = fmt.Sprintf("%d (%d log records, %d spans, %d error texts scanned for %d keys)",
		len(leaks), records, spans, texts, l.Keys.Len())
	kinds := [...]string{keyscan.Record: "a log record", keyscan.Span: "a span", keyscan.ErrorText: "an error text"}
	for i, x := range leaks {
		if i == 20 {
			problems = append(problems, fmt.Sprintf("... and %d more texts holding a full key", len(leaks)-i))
			break
		}
		problems = append(problems, fmt.Sprintf("a full idempotency key in %s (%s): %.400s", kinds[x.Kind], x.Where, x.Text))
	}
	return figure, problems, nil
}
