package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"kvwin/engine"
	"kvwin/router"
)

// Backends found by DNS: --backend KIND=dns://NAME:PORT (dns+https:// for
// TLS) is one backend of every address NAME resolves to, each reached at
// http(s)://ADDRESS:PORT with the URL's path and query. A Kubernetes
// headless Service answers with exactly its ready pods.
//
// NAME is resolved at start and then every --backend-resolve-interval
// (default 10s: twice CoreDNS's default record TTL of 5s, so a pod that
// becomes ready is routed to within about one interval after its record
// appears, and a fleet of any size costs one lookup per interval). An
// address that appears joins the router (probed by a health check, then
// routed to); one that vanishes drains (its turns in flight finish, then
// it is closed). A lookup that fails for another reason than "no such
// name" (the DNS server unreachable, a timeout) changes nothing: a DNS
// blip does not drain the fleet.

// DefaultResolveInterval is --backend-resolve-interval's default.
const DefaultResolveInterval = 10 * time.Second

// Resolver looks up the addresses of a host name (net.Resolver does).
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

var _ Resolver = (*net.Resolver)(nil)

// dnsSpec is one --backend KIND=dns://NAME:PORT.
type dnsSpec struct {
	spec   string // as given
	kind   backendKind
	scheme string // http or https
	host   string // the name resolved
	port   string
	rest   string // path and ?query, appended to each address's URL
}

// parseDNS reads url (of --backend KIND=url) as a DNS spec; ok is false
// for a URL of another scheme.
func parseDNS(spec string, kind backendKind, raw string) (d dnsSpec, ok bool, err error) {
	scheme, _, found := strings.Cut(raw, "://")
	if !found || (scheme != "dns" && scheme != "dns+https") {
		return dnsSpec{}, false, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return dnsSpec{}, true, fmt.Errorf("--backend %q: %w", spec, err)
	}
	if u.Hostname() == "" || u.Port() == "" {
		return dnsSpec{}, true, fmt.Errorf("--backend %q: want %s://NAME:PORT (a name to resolve and the port its addresses serve on)", spec, scheme)
	}
	d = dnsSpec{spec: spec, kind: kind, scheme: "http", host: u.Hostname(), port: u.Port(), rest: u.EscapedPath()}
	if scheme == "dns+https" {
		d.scheme = "https"
	}
	if u.RawQuery != "" {
		d.rest += "?" + u.RawQuery
	}
	return d, true, nil
}

// urlOf is the backend URL of one resolved address.
func (d dnsSpec) urlOf(addr string) string {
	return d.scheme + "://" + net.JoinHostPort(addr, d.port) + d.rest
}

// resolve returns the backend URLs of d's addresses, sorted. changed is
// false when the lookup failed in a way that says nothing about the fleet.
func (d dnsSpec) resolve(ctx context.Context, res Resolver, timeout time.Duration) (urls []string, changed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addrs, err := res.LookupHost(ctx, d.host)
	var dnsErr *net.DNSError
	if err != nil && !(errors.As(err, &dnsErr) && dnsErr.IsNotFound) {
		return nil, false, err
	}
	for _, a := range addrs {
		urls = append(urls, d.urlOf(a))
	}
	slices.Sort(urls)
	return slices.Compact(urls), true, nil
}

// dnsFleet keeps a router's backends of one DNS spec in step with what the
// name resolves to. Its loop is the only writer of open.
type dnsFleet struct {
	d        dnsSpec
	res      Resolver
	interval time.Duration
	opts     backendOptions
	open     map[string]remoteBackend // by URL
	drains   sync.WaitGroup           // backends draining, closed when drained
}

// dnsFleet returns the fleet of d as a's configuration has it.
func (a *App) dnsFleet(d dnsSpec, opts backendOptions) *dnsFleet {
	res := a.f.Resolver
	if res == nil {
		res = net.DefaultResolver
	}
	interval := a.f.BackendResolveInterval
	if interval <= 0 {
		interval = DefaultResolveInterval
	}
	return &dnsFleet{d: d, res: res, interval: interval, opts: opts, open: map[string]remoteBackend{}}
}

// start resolves d once and opens a backend of every address, which it
// returns (none when the name does not resolve yet: they join later).
func (f *dnsFleet) start() []engine.Backend {
	log := f.opts.log
	urls, _, err := f.d.resolve(context.Background(), f.res, f.interval)
	if err != nil {
		log.Warn("backend name not resolved at start; its addresses join when it resolves", "backend", f.d.spec, "err", err)
	}
	var out []engine.Backend
	for _, u := range urls {
		b, err := f.d.kind.open(u, f.opts)
		if err != nil {
			log.Warn("backend address not opened", "backend", u, "err", err)
			continue
		}
		f.open[u] = b
		out = append(out, b)
	}
	log.Info("backends found by DNS", "backend", f.d.spec, "addresses", len(out), "resolve_interval", f.interval)
	return out
}

// closeAll closes every backend f opened (the router was not built).
func (f *dnsFleet) closeAll() {
	for _, b := range f.open {
		b.Close()
	}
}

// watch re-resolves every interval and joins and drains backends of r
// until ctx ends; then it closes every backend it opened, draining ones
// included.
func (f *dnsFleet) watch(ctx context.Context, r *router.Router) {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	defer func() {
		f.drains.Wait()
		for _, b := range f.open {
			b.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		urls, changed, err := f.d.resolve(ctx, f.res, f.interval)
		if !changed {
			if ctx.Err() == nil {
				f.opts.log.Warn("backend name not resolved; the fleet is kept as it is", "backend", f.d.spec, "err", err)
			}
			continue
		}
		f.apply(ctx, r, urls)
	}
}

// apply joins the URLs not open yet and drains those no longer resolved.
func (f *dnsFleet) apply(ctx context.Context, r *router.Router, urls []string) {
	for _, u := range urls {
		if _, ok := f.open[u]; ok {
			continue
		}
		b, err := f.d.kind.open(u, f.opts)
		if err != nil {
			f.opts.log.Warn("backend address not opened", "backend", u, "err", err)
			continue
		}
		if err := r.Add(b); err != nil {
			f.opts.log.Warn("backend address not added", "backend", u, "err", err)
			b.Close()
			continue
		}
		f.open[u] = b
	}
	for u, b := range f.open {
		if slices.Contains(urls, u) {
			continue
		}
		delete(f.open, u)
		drained := r.Remove(b.Info().Name)
		f.drains.Add(1)
		go func() {
			defer f.drains.Done()
			select {
			case <-drained:
			case <-ctx.Done(): // shutting down: its turns are cut anyway
			}
			b.Close()
		}()
	}
}
