package kubetarget

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
)

// Watcher wakes whoever waits on a NodeFault when the one shared informer
// of NodeFaults sees it change, so that 500 injections waiting for their
// agents cost one watch, not 500 polling loops. One Watcher serves every
// run of a controller.
type Watcher struct {
	reader client.Reader

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
	// gone is the last status of NodeFaults deleted while this process
	// watched, so that Recover can tell a NodeFault deleted after it
	// recovered from one deleted while applied.
	gone map[string]goneFault
}

type goneFault struct {
	phase v1alpha1.NodeFaultPhase
	at    time.Time
}

// goneTTL is how long the last status of a deleted NodeFault is kept:
// longer than any recovery waits for it.
const goneTTL = time.Hour

// NewWatcher registers with c's NodeFault informer (creating it if c has
// none yet). c must be started by its owner (a manager starts its cache).
func NewWatcher(ctx context.Context, c cache.Cache) (*Watcher, error) {
	w := &Watcher{reader: c, waiters: map[string]map[chan struct{}]struct{}{}, gone: map[string]goneFault{}}
	inf, err := c.GetInformer(ctx, &v1alpha1.NodeFault{})
	if err != nil {
		return nil, fmt.Errorf("watch NodeFaults: %w", err)
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.changed(obj, false) },
		UpdateFunc: func(_, obj any) { w.changed(obj, false) },
		DeleteFunc: func(obj any) { w.changed(obj, true) },
	})
	if err != nil {
		return nil, fmt.Errorf("watch NodeFaults: %w", err)
	}
	return w, nil
}

func (w *Watcher) changed(obj any, deleted bool) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	nf, ok := obj.(*v1alpha1.NodeFault)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if deleted {
		now := time.Now()
		w.gone[nf.Name] = goneFault{phase: nf.Status.Phase, at: now}
		for k, g := range w.gone {
			if now.Sub(g.at) > goneTTL {
				delete(w.gone, k)
			}
		}
	} else {
		delete(w.gone, nf.Name)
	}
	for ch := range w.waiters[nf.Name] {
		select {
		case ch <- struct{}{}:
		default: // already woken; the waiter reads the newest state
		}
	}
}

// lastPhase is the phase a NodeFault deleted while this process watched
// last had, and whether it was seen deleted.
func (w *Watcher) lastPhase(name string) (v1alpha1.NodeFaultPhase, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g, ok := w.gone[name]
	return g.phase, ok
}

// recheck bounds how long a waiter trusts the informer alone: a cheap
// cache read, in case a wake-up was lost.
const recheck = 30 * time.Second

// Wait calls done with the cached NodeFault (nil when the cache has none)
// now and after each change to it, until done says finished or fails, or
// ctx ends.
func (w *Watcher) Wait(ctx context.Context, name string, done func(nf *v1alpha1.NodeFault) (bool, error)) error {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	if w.waiters[name] == nil {
		w.waiters[name] = map[chan struct{}]struct{}{}
	}
	w.waiters[name][ch] = struct{}{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.waiters[name], ch)
		if len(w.waiters[name]) == 0 {
			delete(w.waiters, name)
		}
		w.mu.Unlock()
	}()
	t := time.NewTicker(recheck)
	defer t.Stop()
	for {
		var nf v1alpha1.NodeFault
		err := w.reader.Get(ctx, client.ObjectKey{Name: name}, &nf)
		var cur *v1alpha1.NodeFault
		switch {
		case err == nil:
			cur = &nf
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("read NodeFault %s: %w", name, err)
		}
		if ok, err := done(cur); ok || err != nil {
			return err
		}
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
