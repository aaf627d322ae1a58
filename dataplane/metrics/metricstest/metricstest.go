// Package metricstest reads expositions in tests: it parses what /metrics sent, as Prometheus
// would, so that tests assert on samples rather than on strings.
package metricstest

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are parsed metric families by name.
type Families map[string]*dto.MetricFamily

// Parse decodes an exposition body as sent with contentType and contentEncoding ("" or
// "identity" for none, or "gzip"). Prometheus text and OpenMetrics 1.0 are understood; an
// OpenMetrics body must end with its "# EOF" line.
func Parse(body []byte, contentType, contentEncoding string) (Families, error) {
	switch contentEncoding {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
	default:
		return nil, fmt.Errorf("unexpected Content-Encoding %q", contentEncoding)
	}
	format := expfmt.Format(contentType)
	switch format.FormatType() {
	case expfmt.TypeTextPlain:
		parser := expfmt.NewTextParser(model.LegacyValidation)
		families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("parsing text exposition: %w", err)
		}
		return families, nil
	case expfmt.TypeOpenMetrics:
		const eof = "# EOF\n"
		if !bytes.HasSuffix(body, []byte(eof)) {
			return nil, fmt.Errorf("OpenMetrics exposition does not end with %q", eof)
		}
		return parseOpenMetrics(body[:len(body)-len(eof)], format)
	}
	return nil, fmt.Errorf("unexpected Content-Type %q", contentType)
}

// parseOpenMetrics decodes OpenMetrics 1.0 with the Prometheus text parser, after rewriting what
// the text format spells differently: a counter family is named without its _total suffix in
// OpenMetrics, and there are # UNIT lines and _created samples. Named as in the text format, the
// families keep apart, as they must, when a gauge has the name of a counter without its suffix
// (client_golang's go_memstats_alloc_bytes and go_memstats_alloc_bytes_total).
func parseOpenMetrics(body []byte, format expfmt.Format) (Families, error) {
	lines := strings.Split(string(body), "\n")
	var kept bytes.Buffer
	for i, line := range lines {
		switch {
		case strings.HasPrefix(line, "# UNIT "):
			continue
		case strings.HasPrefix(line, "# HELP "):
			name, help, _ := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			if i+1 < len(lines) && lines[i+1] == "# TYPE "+name+" counter" {
				line = "# HELP " + name + "_total " + help
			}
		case strings.HasPrefix(line, "# TYPE ") && strings.HasSuffix(line, " counter"):
			name := strings.TrimSuffix(strings.TrimPrefix(line, "# TYPE "), " counter")
			line = "# TYPE " + name + "_total counter"
		case !strings.HasPrefix(line, "#"):
			name, _, _ := strings.Cut(line, "{")
			name, _, _ = strings.Cut(name, " ")
			if strings.HasSuffix(name, "_created") {
				continue
			}
		}
		kept.WriteString(line + "\n")
	}
	dec := expfmt.NewDecoder(&kept, format)
	families := Families{}
	for {
		var mf dto.MetricFamily
		err := dec.Decode(&mf)
		if errors.Is(err, io.EOF) {
			return families, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parsing OpenMetrics exposition: %w", err)
		}
		families[mf.GetName()] = &mf
	}
}

// Value is the value of the sample of the family name whose labels include labels (pairs of
// name and value), and whether there is exactly one such sample. Counters, gauges and untyped
// samples have a value; for a histogram it is the count of observations.
func (fs Families) Value(name string, labels ...string) (float64, bool) {
	ms := fs.Samples(name, labels...)
	if len(ms) != 1 {
		return 0, false
	}
	m := ms[0]
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount()), true
	}
	return 0, false
}

// Samples are the samples of the family name whose labels include labels.
func (fs Families) Samples(name string, labels ...string) []*dto.Metric {
	mf := fs[name]
	if mf == nil {
		return nil
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	var out []*dto.Metric
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		matches := true
		for k, v := range want {
			if have[k] != v {
				matches = false
			}
		}
		if matches {
			out = append(out, m)
		}
	}
	return out
}

// LabelValues are the values of label across the samples of the family name, sorted.
func (fs Families) LabelValues(name, label string) []string {
	set := map[string]bool{}
	for _, m := range fs.Samples(name) {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				set[lp.GetValue()] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}
