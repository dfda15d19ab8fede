package node

import (
	"errors"
	"net/http"

	"github.com/gpumesh/gpumesh/node/api"
	"github.com/gpumesh/gpumesh/node/console"
	"github.com/gpumesh/gpumesh/node/lease"
	"github.com/gpumesh/gpumesh/node/metrics"
)

// viewRoutes registers the control API's read-only views (GET, changing
// nothing): on the control socket, and on the metrics listener for the
// web console (package console), whose pages read them there. Both are
// the same handlers, so the console shows what `gpumesh ... --json` says.
//
// The metrics listener is reachable by every local user unless it has a
// token (metrics_token_file), so onConsole leaves out what only the
// owner's socket hands out: a service's gateway token (the key to the
// service) always, and job logs unless the listener has a token.
func (d *Daemon) viewRoutes(mux *http.ServeMux, onConsole, tokened bool) {
	api.Handle(mux, "GET /v1/status", func(*http.Request) (any, error) { return d.Status(), nil })
	api.Handle(mux, "GET /v1/peers", func(*http.Request) (any, error) { return d.Peers(), nil })
	api.Handle(mux, "GET /v1/providers", d.handleProviders)
	m := d.market
	if m == nil {
		return
	}
	t := m.tracker
	api.Handle(mux, "GET /v1/jobs", func(*http.Request) (any, error) { return t.List(), nil })
	api.HandleTagged(mux, "GET /v1/jobs/{id}", func(r *http.Request, seen string) (any, error) { return jobView(r, t, seen) })
	api.Handle(mux, "GET /v1/jobs/{id}/bids", func(r *http.Request) (any, error) { return t.Bids(r.PathValue("id")) })
	logs := m.relay().Logs
	if onConsole && !tokened {
		logs = func(w http.ResponseWriter, _ *http.Request) {
			api.WriteError(w, &api.StatusError{Code: http.StatusForbidden,
				Msg: "job logs are on the console only when its listener requires a token (metrics_token_file): any local user can read it"})
		}
	}
	mux.HandleFunc("GET /v1/jobs/{id}/logs", logs)
	api.Handle(mux, "GET /v1/provider/stats", func(*http.Request) (any, error) { return m.stats.Now() })
	api.Handle(mux, "GET /v1/provider/history", func(*http.Request) (any, error) { return m.stats.History() })
	svc := func(v api.ServiceView) api.ServiceView {
		if onConsole {
			v.Token = ""
		}
		return v
	}
	api.Handle(mux, "GET /v1/services", func(*http.Request) (any, error) {
		vs := m.svc.List()
		for i := range vs {
			vs[i] = svc(vs[i])
		}
		return vs, nil
	})
	api.Handle(mux, "GET /v1/services/{id}", func(r *http.Request) (any, error) {
		v, err := m.svc.View(r.PathValue("id"))
		return svc(v), err
	})
	api.Handle(mux, "GET /v1/services/{id}/history", func(r *http.Request) (any, error) { return m.svc.History(r.PathValue("id")) })
}

// serveMetrics exposes the metrics and the web console (and, with
// metrics_pprof, /debug/pprof/) on the configured loopback address
// (opt-in: metrics_addr).
func (d *Daemon) serveMetrics() error {
	m := d.market
	if d.cfg.MetricsAddr == "" || m == nil {
		return nil
	}
	m.metrics.Register(metrics.State{
		Peers: func() int { return len(d.net.Host.Network().Peers()) },
		GPUs:  len(d.inv.GPUs),
		ProviderStats: func() (api.ProviderStatsView, bool) {
			v, err := m.stats.Now()
			return v, err == nil
		},
		Balances:   d.db.Balances,
		Reputation: func() float64 { return m.book.Score(d.ID().String()) },
		Jobs:       func() int { return len(m.tracker.List()) },
		Counters:   m.allCounters,
		Services:   m.svc.List,
	})
	srv, ln, err := m.metrics.Listen(metrics.ListenConfig{Addr: d.cfg.MetricsAddr, TokenFile: d.cfg.MetricsTokenFile,
		Pprof: d.cfg.MetricsPprof, Console: console.Site{Views: func(mux *http.ServeMux, tokened bool) { d.viewRoutes(mux, true, tokened) }}})
	if err != nil {
		return err
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Warn("metrics server", "err", err)
		}
	}()
	go func() {
		<-d.ctx.Done()
		_ = srv.Close()
	}()
	return nil
}

// jobView is GET /v1/jobs/{id}: the job's view now or, with wait=D (a Go
// duration up to api.MaxLongPoll), a long poll (lease.Tracker.WaitView):
// the view as soon as it is not the one the caller has (seen, the ETag of
// its last answer: at once when it changed since), or after D. A caller
// that names none waits for a change from the view at its call.
func jobView(r *http.Request, t *lease.Tracker, seen string) (api.JobView, error) {
	id := r.PathValue("id")
	d, ok, err := api.LongPollWait(r)
	if err != nil {
		return api.JobView{}, err
	}
	if !ok {
		return t.View(id)
	}
	var has func(api.JobView) bool
	if seen != "" {
		has = func(v api.JobView) bool {
			_, tag, err := api.TaggedBody(v)
			return err == nil && tag == seen
		}
	}
	return t.WaitView(r.Context(), id, d, has)
}
