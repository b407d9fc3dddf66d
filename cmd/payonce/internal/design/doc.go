// Package design generates the idempotency design document of a system
// that uses (or will use) payonce: the twelve sections of the reference
// design (action analysis, key design, fingerprints, concurrency control,
// partial failure recovery, provider coordination, saga state machine,
// security, anti-patterns, monitoring, test scenarios, build order)
// tailored to the user's answers, and nine deliverables embedded (action
// map, the real DDL from package migrations, middleware, fingerprint
// utility, cleanup job, test suite skeleton, the real alert rules of
// deploy/monitoring, build order checklist, runbook).
//
// # Sections
//
// [Answers] come from a terminal ([Asker]), flags or an answers file
// ([LoadAnswers], YAML or JSON), completed by a [Scan] of the user's Go
// code, which also reports anti-patterns at file:line. [Build] turns them
// into a [Document]; [Render] writes it as one self-contained HTML file
// (html/template, inline CSS, no external reference) or Markdown
// (text/template) with the same structure.
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
