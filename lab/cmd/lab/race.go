//go:build race

package main

// raceEnabled says that payonce runs under the race detector: the demo's
// worker is then built with it too.
const raceEnabled = true
