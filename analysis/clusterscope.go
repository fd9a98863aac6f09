package analysis

import (
	"slices"
	"strings"
)

// UnscopedSelectors returns the series selectors of a check's template
// (one ParseQueryTemplate takes) that {{.Cluster}} does not keep to one
// cluster: those whose braces do not place it, and metric names with no
// braces at all. In a fleet's Prometheus such a selector counts every
// cluster's series: a ratio whose denominator is unscoped divides this
// cluster's errors by the whole fleet's requests.
//
// It reads the template rendered with a sentinel cluster matcher, with a
// scan that knows of PromQL only what tells a selector apart: string
// literals, comments, braces, brackets, numbers and durations, function
// calls, aggregations, and the label lists of by, without, on, ignoring,
// group_left and group_right. (Prometheus's own parser would bring its storage engine
// into this module.)
func UnscopedSelectors(text string) ([]string, error) {
	t, _, err := ParseQueryTemplate("scope", text)
	if err != nil {
		return nil, err
	}
	params := sampleParams
	params.Cluster = ClusterMatcher(scopeSentinel, "x")
	q, err := render(t, params)
	if err != nil {
		return nil, err
	}
	return unscoped(q, params.Cluster), nil
}

// scopeSentinel is a label no PromQL text holds, standing for the
// cluster's.
const scopeSentinel = "meshwave_cluster_scope_sentinel"

// unscoped scans rendered PromQL for selectors without matcher.
func unscoped(q, matcher string) []string {
	var out []string
	bareName := ""
	flush := func() {
		if bareName != "" {
			out = append(out, bareName)
			bareName = ""
		}
	}
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			flush()
			i = skipString(q, i)
		case c == '#':
			// A comment, to the end of the line.
			flush()
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '{':
			end := i + 1
			for end < len(q) && q[end] != '}' {
				if q[end] == '"' || q[end] == '\'' || q[end] == '`' {
					end = skipString(q, end)
					continue
				}
				end++
			}
			sel := bareName + q[i:min(end+1, len(q))]
			bareName = ""
			if !strings.Contains(q[i:min(end+1, len(q))], matcher) {
				out = append(out, strings.ReplaceAll(sel, matcher, ""))
			}
			i = end + 1
		case c == '[':
			flush()
			for i < len(q) && q[i] != ']' {
				i++
			}
			i++
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9':
			flush()
			for i < len(q) && (isIdent(q[i]) || q[i] == '.') {
				i++
			}
		case isIdentStart(c):
			flush()
			start := i
			for i < len(q) && isIdent(q[i]) {
				i++
			}
			word := q[start:i]
			next := i
			for next < len(q) && (q[next] == ' ' || q[next] == '\t' || q[next] == '\n' || q[next] == '\r') {
				next++
			}
			lower := strings.ToLower(word)
			switch {
			case word == scopeSentinel:
				out = append(out, "{{.Cluster}} outside a selector's braces")
			case slices.Contains(labelListKeywords, lower) && next < len(q) && q[next] == '(':
				// A list of label names, not of selectors.
				for i = next; i < len(q) && q[i] != ')'; i++ {
				}
				i++
			case slices.Contains(labelListKeywords, lower), slices.Contains(operatorKeywords, lower):
			case next < len(q) && q[next] == '(':
				// A function or an aggregation.
			case slices.Contains(aggregations, lower) && (wordAt(q, next) == "by" || wordAt(q, next) == "without"):
				// An aggregation whose by or without comes first.
			case next < len(q) && q[next] == '{':
				// A metric name, its braces after a space.
				bareName, i = word, next
			default:
				// A metric name; PromQL's keywords are metric names too
				// where no operator is expected.
				bareName = word
			}
		default:
			flush()
			i++
		}
	}
	flush()
	return out
}

// labelListKeywords take a parenthesised list of label names.
var labelListKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// operatorKeywords are PromQL's words that are not series where they
// stand between or after expressions: binary operators, modifiers, and
// the special numbers.
var operatorKeywords = []string{"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}

// aggregations are PromQL's aggregation operators: series names unless
// their parentheses, or their by or without, follow.
var aggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}

// wordAt is the identifier at i in q, or "".
func wordAt(q string, i int) string {
	end := i
	for end < len(q) && isIdent(q[end]) {
		end++
	}
	return strings.ToLower(q[i:end])
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

// skipString returns the index after the string literal at i.
func skipString(q string, i int) int {
	quote := q[i]
	for i++; i < len(q); i++ {
		switch {
		case q[i] == '\\' && quote != '`':
			i++
		case q[i] == quote:
			return i + 1
		}
	}
	return i
}
