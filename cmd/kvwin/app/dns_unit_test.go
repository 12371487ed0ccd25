package app

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseDNSBackend(t *testing.T) {
	kind := backendKinds["llamaserver"]
	for _, tc := range []struct {
		raw     string
		dns     bool
		wantErr string
		url     string // of address 10.0.0.7
	}{
		{"http://10.0.0.5:8080", false, "", ""},
		{"dns://llama:8080", true, "", "http://10.0.0.7:8080"},
		{"dns+https://llama.kvwin.svc:8443/base?x=1", true, "", "https://10.0.0.7:8443/base?x=1"},
		{"dns://llama", true, "NAME:PORT", ""},
		{"dns://:8080", true, "NAME:PORT", ""},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			d, ok, err := parseDNS("llamaserver="+tc.raw, kind, tc.raw)
			if ok != tc.dns || (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("parseDNS(%q) = dns %v, err %v; want dns %v, err containing %q", tc.raw, ok, err, tc.dns, tc.wantErr)
			}
			if tc.url != "" && d.urlOf("10.0.0.7") != tc.url {
				t.Errorf("address URL %q, want %q", d.urlOf("10.0.0.7"), tc.url)
			}
		})
	}
	if d, _, _ := parseDNS("x", kind, "dns://llama:8080"); d.urlOf("fd00::1") != "http://[fd00::1]:8080" {
		t.Errorf("an IPv6 address: %q", d.urlOf("fd00::1"))
	}
}

// resolverFunc is a Resolver of a function.
type resolverFunc func(ctx context.Context, host string) ([]string, error)

func (f resolverFunc) LookupHost(ctx context.Context, host string) ([]string, error) {
	return f(ctx, host)
}

func TestResolveKeepsTheFleetOnAFailedLookup(t *testing.T) {
	d, _, _ := parseDNS("x", backendKinds["llamaserver"], "dns://llama:8080")
	for _, tc := range []struct {
		name    string
		answer  []string
		err     error
		urls    []string
		changed bool
	}{
		{"addresses, sorted and once each", []string{"10.0.0.2", "10.0.0.1", "10.0.0.2"}, nil, []string{"http://10.0.0.1:8080", "http://10.0.0.2:8080"}, true},
		{"no such name: no backend", nil, &net.DNSError{Err: "no such host", IsNotFound: true}, nil, true},
		{"the DNS server did not answer: no change", nil, &net.DNSError{Err: "timeout", IsTimeout: true}, nil, false},
		{"another error: no change", nil, errors.New("boom"), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := resolverFunc(func(context.Context, string) ([]string, error) { return tc.answer, tc.err })
			urls, changed, _ := d.resolve(context.Background(), res, time.Second)
			if !slices.Equal(urls, tc.urls) || changed != tc.changed {
				t.Errorf("resolve = %v, changed %v; want %v, %v", urls, changed, tc.urls, tc.changed)
			}
		})
	}
}
