package scrape

import (
	"context"
	"time"

	"github.com/gpuchaos/gpuchaos/internal/detect/probe"
)

// Probe wraps p, built with probe.FromSpec over s, so that each
// observation scrapes first and then evaluates p on the history. A failed
// scrape leaves the series stale and p is still evaluated (an exporter
// that stopped answering is something detectors should see); only while
// no scrape has ever succeeded is the failure the observation's error, so
// a wrong URL does not read as "nothing detected".
func Probe(p probe.Probe, s *Store) probe.Probe { return wrap(p, s, true) }

// Over wraps p, built with probe.FromSpec over s, so that each observation
// evaluates p on the history as it stands, for a store that something
// else scrapes in the background: a probe that scraped too would wait
// behind those scrapes for a page that does not answer.
func Over(p probe.Probe, s *Store) probe.Probe { return wrap(p, s, false) }

func wrap(p probe.Probe, s *Store, scrape bool) probe.Probe {
	sp := scraping{p: p, s: s, scrape: scrape}
	if a, ok := p.(probe.Anchored); ok {
		return &anchoredScraping{sp, a}
	}
	return &sp
}

// anchoredScraping keeps an anchored probe anchored behind the wrapper.
type anchoredScraping struct {
	scraping
	a probe.Anchored
}

func (sp *anchoredScraping) SetAnchor(a probe.Anchor) { sp.a.SetAnchor(a) }
func (sp *anchoredScraping) History() time.Duration   { return sp.a.History() }

type scraping struct {
	p      probe.Probe
	s      *Store
	scrape bool
}

func (sp *scraping) Name() string { return sp.p.Name() }

func (sp *scraping) Observe(ctx context.Context) (probe.Observation, error) {
	if sp.scrape {
		if err := sp.s.Scrape(ctx); err != nil && sp.s.Scrapes() == 0 {
			return probe.Observation{}, err
		}
	}
	var (
		obs probe.Observation
		err error
	)
	sp.s.With(func() { obs, err = sp.p.Observe(ctx) })
	return obs, err
}
