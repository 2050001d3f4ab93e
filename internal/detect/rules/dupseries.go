package rules

import (
	"maps"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// sameSeries reports whether two expressions, recorded under the same name
// and labels, provably write the same series whenever both produce a
// sample. That holds when they are the same expression, or when each
// yields one series whose labels are fully known and equal: an aggregation
// without grouping (`max(x)`), or one by labels that equality matchers pin
// to one value each (`sum by (job) (x{job="a"})`).
//
// Anything else may keep them apart — different regular-expression
// matchers on a label they keep, a label_replace, a label neither pins — so
// it is not counted as a collision: Prometheus loads such rules, and
// refusing them refused kube-prometheus' standard rules.
func sameSeries(a, b parser.Expr) bool {
	if a == nil || b == nil {
		return false
	}
	if a.String() == b.String() {
		return true
	}
	la, okA := outputLabels(a)
	lb, okB := outputLabels(b)
	return okA && okB && maps.Equal(la, lb)
}

// outputLabels returns the one label set (metric name aside) every sample
// of e carries, when the expression alone decides it; ok is false when
// the labels come from the data.
func outputLabels(e parser.Expr) (map[string]string, bool) {
	switch e := e.(type) {
	case *parser.ParenExpr:
		return outputLabels(e.Expr)
	case *parser.StepInvariantExpr:
		return outputLabels(e.Expr)
	case *parser.UnaryExpr:
		return outputLabels(e.Expr)
	case *parser.NumberLiteral:
		// A scalar is recorded as one series with no labels.
		return map[string]string{}, true
	case *parser.Call:
		switch e.Func.Name {
		case "vector", "time", "scalar", "pi":
			return map[string]string{}, true
		}
		return nil, false
	case *parser.AggregateExpr:
		switch e.Op {
		case parser.TOPK, parser.BOTTOMK, parser.LIMITK, parser.LIMIT_RATIO, parser.COUNT_VALUES:
			return nil, false
		}
		if e.Without {
			return nil, false
		}
		pins := pinned(e.Expr)
		out := map[string]string{}
		for _, g := range e.Grouping {
			v, ok := pins[g]
			if !ok {
				return nil, false
			}
			if v != "" {
				out[g] = v
			}
		}
		return out, true
	case *parser.BinaryExpr:
		lt, rt := e.LHS.Type(), e.RHS.Type()
		switch {
		case lt == parser.ValueTypeScalar && rt == parser.ValueTypeScalar:
			return map[string]string{}, true
		case rt == parser.ValueTypeScalar:
			return outputLabels(e.LHS)
		case lt == parser.ValueTypeScalar:
			return outputLabels(e.RHS)
		}
		// Two vectors: the result's labels are one side's, save for a
		// group modifier's included labels and the union of `or`.
		vm := e.VectorMatching
		if e.Op == parser.LOR || vm == nil || len(vm.Include) > 0 {
			return nil, false
		}
		if vm.Card == parser.CardOneToMany {
			return outputLabels(e.RHS)
		}
		return outputLabels(e.LHS)
	}
	return nil, false
}

// pinned returns the labels that every sample of e carries with one value
// known from the expression: a selector's equality matchers ("" for a label
// it requires absent), kept through functions, filters and aggregations
// that keep the label.
func pinned(e parser.Expr) map[string]string {
	switch e := e.(type) {
	case *parser.ParenExpr:
		return pinned(e.Expr)
	case *parser.StepInvariantExpr:
		return pinned(e.Expr)
	case *parser.UnaryExpr:
		return pinned(e.Expr)
	case *parser.MatrixSelector:
		return pinned(e.VectorSelector)
	case *parser.SubqueryExpr:
		return pinned(e.Expr)
	case *parser.VectorSelector:
		out := map[string]string{}
		for _, m := range e.LabelMatchers {
			if m.Type == labels.MatchEqual && m.Name != model.MetricNameLabel {
				out[m.Name] = m.Value
			}
		}
		return out
	case *parser.Call:
		var arg parser.Expr
		for _, a := range e.Args {
			if t := a.Type(); t == parser.ValueTypeVector || t == parser.ValueTypeMatrix {
				arg = a
				break
			}
		}
		if arg == nil {
			return map[string]string{}
		}
		out := pinned(arg)
		switch e.Func.Name {
		case "label_replace", "label_join":
			// The destination label is rewritten from the data.
			if len(e.Args) > 1 {
				if s, ok := e.Args[1].(*parser.StringLiteral); ok {
					delete(out, s.Val)
				}
			}
		}
		return out
	case *parser.AggregateExpr:
		in := pinned(e.Expr)
		out := map[string]string{}
		switch {
		case e.Op == parser.COUNT_VALUES:
		case e.Op == parser.TOPK || e.Op == parser.BOTTOMK || e.Op == parser.LIMITK || e.Op == parser.LIMIT_RATIO:
			out = in
		case e.Without:
			for k, v := range in {
				if !slices.Contains(e.Grouping, k) {
					out[k] = v
				}
			}
		default:
			for _, g := range e.Grouping {
				if v, ok := in[g]; ok {
					out[g] = v
				}
			}
		}
		return out
	case *parser.BinaryExpr:
		lt, rt := e.LHS.Type(), e.RHS.Type()
		switch {
		case rt == parser.ValueTypeScalar:
			return pinned(e.LHS)
		case lt == parser.ValueTypeScalar:
			return pinned(e.RHS)
		}
		vm := e.VectorMatching
		if e.Op == parser.LOR || vm == nil {
			return map[string]string{}
		}
		side := pinned(e.LHS)
		if vm.Card == parser.CardOneToMany {
			side = pinned(e.RHS)
		}
		for _, l := range vm.Include {
			delete(side, l)
		}
		return side
	}
	return map[string]string{}
}
