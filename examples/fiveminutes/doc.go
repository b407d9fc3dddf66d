// Package fiveminutes holds the README's "Five minutes per retry source"
// paths as runnable examples, one per source of retries (a queue, a cron
// slot, a payment), each with its output checked. The HTTP path is the
// quick start's, run by pgstore's ExampleMiddleware.
package fiveminutes
