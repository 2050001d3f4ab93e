package exposition

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ContentType is the media type of a page in the text format, as promhttp
// names it for a scraper that does not ask for another: version 0.0.4,
// with metric names escaped to the legacy character set (ours need no
// escaping).
const ContentType = string(expfmt.FmtText) + "; escaping=" + model.EscapeUnderscores

// ShutdownGrace is how long in-flight scrapes get to finish when a server
// of this handler stops: the agent's and the live twin's.
const ShutdownGrace = 5 * time.Second

// Options configure Handler.
type Options struct {
	// Gather builds the page, once per scrape of /metrics; required. It
	// runs on the scrape's goroutine, possibly on several at once, and
	// should take its owner's lock only while it reads the snapshot. The
	// families it returns are the handler's: they are encoded after
	// Gather returns, so they must not share anything the owner changes
	// later.
	Gather func() []*dto.MetricFamily
	// Healthy answers /healthz: 200 "ok" when it returns true, 503 "not
	// running" when false. nil means always healthy.
	Healthy func() bool
	// Logger receives errors writing a page (a scraper that went away);
	// nil discards them.
	Logger *slog.Logger
}

// Handler serves /metrics from Options.Gather through promhttp (format
// negotiation, gzip when asked) and /healthz from Options.Healthy. Other
// methods than GET and HEAD get 405, other paths 404.
func Handler(o Options) http.Handler {
	if o.Gather == nil {
		panic("exposition: Handler without Gather")
	}
	healthy := o.Healthy
	if healthy == nil {
		healthy = func() bool { return true }
	}
	opts := promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}
	if o.Logger != nil {
		opts.ErrorLog = errorLog{o.Logger}
	}
	metrics := promhttp.HandlerFor(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		return o.Gather(), nil
	}), opts)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		switch req.URL.Path {
		case "/metrics":
			metrics.ServeHTTP(w, req)
		case "/healthz":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			if !healthy() {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte("not running\n"))
				return
			}
			_, _ = w.Write([]byte("ok\n"))
		default:
			http.NotFound(w, req)
		}
	})
}

// errorLog is promhttp's Logger over slog.
type errorLog struct{ log *slog.Logger }

func (l errorLog) Println(v ...any) {
	l.log.Warn("serve metrics", "err", fmt.Sprint(v...))
}
