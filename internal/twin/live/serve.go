package live

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/node/exposition"
)

// Serve runs the twin in real time and serves its /metrics on ln until ctx
// ends or either stops with an error, then stops both.
func (r *Runner) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() {
		err := r.Start(ctx)
		cancel()
		errc <- err
	}()
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		} else if err != nil {
			err = fmt.Errorf("serve metrics: %w", err)
		}
		cancel()
		errc <- err
	}()
	<-ctx.Done()
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), exposition.ShutdownGrace)
	defer scancel()
	shutErr := srv.Shutdown(sctx)
	err := errors.Join(<-errc, <-errc)
	if err == nil && shutErr != nil {
		err = fmt.Errorf("stop serving metrics: %w", shutErr)
	}
	return err
}
