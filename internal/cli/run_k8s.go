package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/kube/kubeclient"
	"github.com/gpuchaos/gpuchaos/internal/kube/kubetarget"
	"github.com/gpuchaos/gpuchaos/internal/model/inventory"
	"github.com/gpuchaos/gpuchaos/internal/run/engine"
	"github.com/gpuchaos/gpuchaos/internal/run/target"
)

// clusterRun is `run --target k8s` without --dry-run: the controller in
// the cluster runs the experiment, so the command creates the Experiment,
// follows its status and prints what the other targets print from it.
type clusterRun struct {
	kubeconfig string
	namespace  string
	format     string
	out        io.Writer
	notes      io.Writer
	// poll is how often status is read; the API server's watch would do,
	// but a poll survives a proxy that drops idle watches.
	poll time.Duration
	// abortWait bounds how long an interrupted run waits for the
	// controller to recover before it gives up following.
	abortWait time.Duration
}

func (r clusterRun) run(ctx context.Context, exp *v1alpha1.Experiment, path string) error {
	c, ns, err := kubeclient.New(r.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	if exp.Namespace == "" {
		exp.Namespace = ns
	}
	if r.namespace != "" {
		exp.Namespace = r.namespace
	}
	exp.APIVersion, exp.Kind = v1alpha1.GroupVersion, v1alpha1.KindExperiment
	if err := c.Create(ctx, exp); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: experiment %s/%s exists in the cluster; delete it (kubectl delete experiment -n %s %s) or rename this one",
				path, exp.Namespace, exp.Name, exp.Namespace, exp.Name)
		}
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return fmt.Errorf("%s: the API server refused the experiment: %w", path, err)
		}
		return failed(fmt.Errorf("create experiment %s/%s: %w", exp.Namespace, exp.Name, err))
	}
	fmt.Fprintf(r.notes, "Created experiment %s/%s; following its status (Ctrl-C aborts it: the controller recovers every fault).\n", exp.Namespace, exp.Name)

	key := client.ObjectKeyFromObject(exp)
	printed := 0
	follow := func(ctx context.Context) (*v1alpha1.Experiment, error) {
		t := time.NewTicker(r.poll)
		defer t.Stop()
		for {
			var cur v1alpha1.Experiment
			if err := c.Get(ctx, key, &cur); err != nil {
				if apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("experiment %s was deleted while it ran", key)
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				fmt.Fprintf(r.notes, "read experiment %s: %v (retrying)\n", key, err)
			} else {
				if r.format == "table" {
					printed = printStatusEvents(r.out, &cur, printed)
				}
				if cur.Status.Phase.Final() {
					return &cur, nil
				}
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-t.C:
			}
		}
	}
	final, err := follow(ctx)
	if err != nil && ctx.Err() != nil {
		// Interrupted: abort through the API and keep following, so the
		// command returns only once the controller has recovered.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.abortWait)
		defer cancel()
		patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.AnnotationAbort + `":"true"}}}`)
		if perr := c.Patch(actx, &v1alpha1.Experiment{ObjectMeta: metav1.ObjectMeta{Name: exp.Name, Namespace: exp.Namespace}},
			client.RawPatch(types.MergePatchType, patch)); perr != nil {
			return failed(fmt.Errorf("%w; abort experiment %s: %w (abort it with kubectl annotate experiment -n %s %s %s=true)",
				err, key, perr, exp.Namespace, exp.Name, v1alpha1.AnnotationAbort))
		}
		fmt.Fprintf(r.notes, "Aborting experiment %s; waiting for the controller to recover its faults.\n", key)
		if final, ferr := follow(actx); ferr != nil {
			return failed(fmt.Errorf("%w; experiment %s not yet recovered: %w", err, key, ferr))
		} else if r.format == "table" {
			printVerdicts(r.out, engine.StatusRecord(final))
		}
		return err
	}
	if err != nil {
		return failed(err)
	}
	rec := engine.StatusRecord(final)
	if r.format == "json" {
		if err := writeJSON(r.out, rec); err != nil {
			return failed(err)
		}
	} else {
		printVerdicts(r.out, rec)
	}
	if c := meta.FindStatusCondition(final.Status.Conditions, v1alpha1.ConditionAdmitted); c != nil && c.Status == metav1.ConditionFalse {
		// Refused before anything was created: bad input, as a refused
		// file is on the other targets.
		return fmt.Errorf("%s: experiment %s refused: %s", path, key, c.Message)
	}
	if final.Status.Phase != v1alpha1.PhaseSucceeded {
		return failed(fmt.Errorf("experiment %s: %s: not every expectation passed", key, final.Status.Phase))
	}
	return nil
}

// printStatusEvents prints the events after the first done, in the
// timeline format of the other targets, and returns how many are printed.
// The status keeps only the newest MaxStatusEvents, so a follower that
// fell behind says how many it missed.
func printStatusEvents(w io.Writer, exp *v1alpha1.Experiment, done int) int {
	evs := exp.Status.Events
	total := exp.Status.EventsTotal
	if total < len(evs) {
		total = len(evs)
	}
	first := total - len(evs) // index of evs[0] in the whole timeline
	if done < first {
		fmt.Fprintf(w, "          (%d events dropped from the status)\n", first-done)
		done = first
	}
	for _, ev := range engine.StatusRecord(exp).Timeline[done-first:] {
		fmt.Fprintf(w, "%+8.0fs  %-12s %s %s\n", ev.Offset, ev.Kind, ev.Name, ev.Detail)
	}
	return total
}

// aimer is a target that aims injections at pods (k8s): a network fault
// narrowed to jobs goes into their pods, a job fault into some or all of
// the job's pods, so the plan's targets alone do not say what is reached.
type aimer interface {
	Aims(sel v1alpha1.Selector, fault, mech string, ref inventory.Ref) ([]kubetarget.Aim, error)
}

var _ aimer = (*kubetarget.Target)(nil)

// podsReached lists, by injection key, the pods each injection of the plan
// would act in; nil on a target that does not aim at pods. An injection
// the target could not aim fails the dry run as it would fail the run.
func podsReached(tgt target.Target, exp *v1alpha1.Experiment, plan *engine.Plan) (map[string][]kubetarget.Aim, error) {
	a, ok := tgt.(aimer)
	if !ok {
		return nil, nil
	}
	out := map[string][]kubetarget.Aim{}
	for _, in := range plan.Injections {
		aims, err := a.Aims(exp.Spec.Selector, in.Fault, in.Mechanism, in.Ref)
		if err != nil {
			return nil, fmt.Errorf("%s on %s: %w", in.Fault, in.Ref.Key(), err)
		}
		if slices.ContainsFunc(aims, func(a kubetarget.Aim) bool { return a.Pod != "" }) {
			out[in.Key] = aims
		}
	}
	return out, nil
}

// plannedPods is a k8s dry run's JSON: the plan and the pods reached.
type plannedPods struct {
	*engine.Plan
	Pods map[string][]kubetarget.Aim `json:"pods"`
}

// printPods follows the plan's table with the pods each injection acts
// in, one line per injection that reaches pods.
func printPods(w io.Writer, plan *engine.Plan, pods map[string][]kubetarget.Aim) error {
	if len(pods) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "Pods reached:"); err != nil {
		return err
	}
	for _, in := range plan.Injections {
		aims, ok := pods[in.Key]
		if !ok {
			continue
		}
		each := make([]string, len(aims))
		for i, a := range aims {
			each[i] = a.Pod + " on " + a.Node
			if a.Rank != nil {
				each[i] += fmt.Sprintf(" (%s rank %d)", a.Job, *a.Rank)
			}
		}
		if _, err := fmt.Fprintf(w, "  %s on %s: %s\n", in.Fault, in.Ref.Key(), strings.Join(each, ", ")); err != nil {
			return err
		}
	}
	return nil
}
