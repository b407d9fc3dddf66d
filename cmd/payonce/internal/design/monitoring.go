package design

import (
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/payonce/payonce/deploy/monitoring"
)

// Alert is one alert rule of deploy/monitoring, as written there.
type Alert struct {
	File, Name, Expr, For, Severity, Summary string
}

// Metric is one of payonce's instruments and the alerts on it.
type Metric struct {
	Instrument, Type, Series string
	Alerts                   []Alert
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

var instrumentLine = regexp.MustCompile(`^#\s+((?:idempotency|inbox|payments|reconcile|saga|cronslot)\.[a-z_.]+)\s+(\(gauge\)\s+)?(\S.*)$`)

// RuleFiles returns the alert rule files embedded from deploy/monitoring,
// by name.
func RuleFiles() (map[string]string, error) {
	names, err := fs.Glob(monitoring.Rules, "*.rules.yml")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, n := range names {
		b, err := fs.ReadFile(monitoring.Rules, n)
		if err != nil {
			return nil, err
		}
		out[n] = string(b)
	}
	return out, nil
}

// Monitoring reads payonce's instruments and alert rules from the rule
// files: the instruments from their header tables, the alerts from the
// rules, each alert attached to the instruments its expression uses.
func Monitoring() ([]Metric, []Alert, error) {
	files, err := RuleFiles()
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var metrics []Metric
	var alerts []Alert
	for _, n := range names {
		text := files[n]
		for _, line := range strings.Split(text, "\n") {
			m := instrumentLine.FindStringSubmatch(line)
			if m == nil || strings.HasPrefix(m[3], "(not used)") {
				continue
			}
			typ := "counter"
			switch {
			case m[2] != "":
				typ = "gauge"
			case strings.HasSuffix(m[1], "_ms"):
				typ = "histogram"
			}
			metrics = append(metrics, Metric{Instrument: m[1], Type: typ, Series: m[3]})
		}
		var rf ruleFile
		if err := yaml.Unmarshal([]byte(text), &rf); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", n, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				alerts = append(alerts, Alert{File: n, Name: r.Alert, Expr: strings.TrimSpace(r.Expr), For: r.For,
					Severity: r.Labels["severity"], Summary: r.Annotations["summary"]})
			}
		}
	}
	for i := range metrics {
		base := strings.ReplaceAll(metrics[i].Instrument, ".", "_")
		for _, a := range alerts {
			if strings.Contains(a.Expr, base) {
				metrics[i].Alerts = append(metrics[i].Alerts, a)
			}
		}
	}
	if len(metrics) == 0 || len(alerts) == 0 {
		return nil, nil, fmt.Errorf("monitoring: no instruments or alerts found in deploy/monitoring")
	}
	return metrics, alerts, nil
}

// threshold is the comparison an alert fires on, read from its expression.
var thresholdRe = regexp.MustCompile(`(>=|<=|>|<|==)\s*([0-9.e+-]+)\s*$`)

func threshold(a Alert) string {
	lines := strings.Split(a.Expr, "\n")
	for _, l := range lines {
		if m := thresholdRe.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			s := m[1] + " " + m[2]
			if a.For != "" {
				s += " for " + a.For
			}
			return s
		}
	}
	if a.For != "" {
		return "for " + a.For
	}
	return "see expression"
}
