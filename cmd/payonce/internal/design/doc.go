// Package design generates the idempotency design document of a system
// that uses (or will use) payonce: the twelve sections of the reference
// design (action analysis, key design, fingerprints, concurrency control,
// partial failure recovery, provider coordination, saga state machine,
// security, anti-patterns, monitoring, test scenarios, build order)
// tailored to the user's answers, and nine deliverables embedded (action
// map, the store, middleware, fingerprint utility, cleanup job, test suite
// skeleton, the real alert rules of deploy/monitoring, build order
// checklist, runbook).
//
// # Sections
//
// [Answers] come from a terminal ([Asker]: the output format first, then
// at most two asks), flags (--action NAME:fields=a,b:p99=2s for each
// action's significant fields and duration) or an answers file
// ([LoadAnswers], YAML or JSON), completed by a [Scan] of the user's Go
// code, which also reports anti-patterns at file:line. Whatever stays
// unanswered is assumed, and every assumption is listed in the document's
// Assumptions box. [Build] turns them into a [Document]: lock timeouts
// from each action's p99, retention from the user's own retry windows,
// where duplicates are detected, outbound effects through an outbox, and
// the record mapped from its logical model onto the user's database
// ([StoreOf]: PostgreSQL, MySQL, Redis, DynamoDB, MongoDB, or the
// technology-agnostic model). [Render] writes it as one self-contained
// HTML file (html/template, inline CSS, no external reference) or
// Markdown (text/template) with the same structure.
//
// # Constraints
//
// [Check] verifies seven constraints, C1..C7 (see [Constraints]), on the
// document and its rendering before anything is written; `payonce design`
// refuses to write a document that breaks one and names it.
//
//	a, _ := design.LoadAnswers("answers.yaml")
//	d, err := design.Build(*a, nil, time.Now())
//	out, err := design.Render(d)
//	if err := design.Check(d, out); err != nil { ... } // names C1..C7
package design
