// Package monitoring embeds payonce's Prometheus alert rules (the
// *.rules.yml files beside it) so that tools such as `payonce design` can
// quote the rules as they are, not a copy that drifts.
package monitoring

import "embed"

// Rules holds every *.rules.yml file of deploy/monitoring.
//
//go:embed *.rules.yml
var Rules embed.FS
