// Package browsercheck renders payonce's HTML outputs (the divergence
// report, the design document) in headless Chromium and checks them: they
// render, make no network request, and every link of their table of
// contents leads to its section. Its tests are the whole package.
package browsercheck
