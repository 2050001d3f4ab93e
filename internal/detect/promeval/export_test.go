package promeval

import (
	"context"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/rules"
)

// EvaluateStepByStep is Evaluate forced onto the path Prometheus itself
// takes: one instant query per rule per evaluation timestamp, groups
// interleaved in time. Tests compare it with the range-query path.
func EvaluateStepByStep(ctx context.Context, set *rules.Set, src Source, start, end time.Time, opts Options) (*Result, error) {
	e, err := newEvaluator(set, src, start, opts, nil)
	if err != nil {
		return nil, err
	}
	e.stepByStep = true
	if err := e.advance(ctx, end); err != nil {
		return nil, err
	}
	return e.result(), nil
}
