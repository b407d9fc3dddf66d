// Package grafana holds payonce's Grafana dashboard (payonce.json), on the
// metrics of the idempotency core, payments, the reconciler, sagas and the
// inbox as the OpenTelemetry Prometheus exporter names them. Import it in
// Grafana (Dashboards > New > Import) with a Prometheus data source; its
// variables choose the data source and the jobs. Its tests check every
// panel's shape and that every query names a metric payonce exports.
package grafana

import _ "embed"

// Dashboard is the dashboard's JSON.
//
//go:embed payonce.json
var Dashboard []byte
