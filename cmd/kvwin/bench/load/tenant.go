package load

import (
	"fmt"
	"strconv"
	"strings"

	"kvwin/engine/queue"
	"kvwin/web"
)

// Modes of a tenant's load (Tenant.Mode).
const (
	// ModeBurst sends Requests requests at once, each a new conversation.
	// Bursts go first: the other tenants start once every burst request
	// has been written to the server, so they meet the queue a burst
	// made rather than the bench's own 64 dials and encodings (the
	// clients share the machine with an in-process server).
	ModeBurst = "burst"
	// ModeSerial sends Requests requests one after another, each when the
	// last one ended.
	ModeSerial = "serial"
	// ModeFlood runs Clients clients, each sending its next request as
	// soon as the last one ended, for the workload's duration.
	ModeFlood = "flood"
)

// Tenant is one tenant's part of a mixed load (--tenants): who sends, in
// which class, how much and how.
type Tenant struct {
	Name string
	// Key is the tenant's API key; empty: bench load makes one when it
	// starts the server, and sends none against --target.
	Key string
	// Class is sent as X-Kvwin-Priority (and is the key's class on a
	// server bench load starts).
	Class queue.Class
	// Weight is the key's weight on a server bench load starts (0: the
	// server's default, 1).
	Weight    float64
	Mode      string
	Clients   int // flood: concurrent clients
	Requests  int // burst: sent at once; serial: one after another
	MaxTokens int // tokens per answer
}

// ParseTenant reads a --tenants value, NAME:OPT=V,OPT=V…, with options
// mode=burst|serial|flood, requests=N, clients=N, class=interactive|batch,
// weight=W, max-tokens=N and key=KEY. def gives what the value leaves out
// (its Name, Key and Mode are ignored; the mode defaults to flood).
func ParseTenant(s string, def Tenant) (Tenant, error) {
	name, opts, _ := strings.Cut(s, ":")
	t := def
	t.Name, t.Key, t.Mode = strings.TrimSpace(name), "", ModeFlood
	if !web.ValidTenant(t.Name) {
		return t, fmt.Errorf("--tenants %q: the tenant name: want 1-64 letters, digits, '.', '_' or '-' before the ':'", s)
	}
	for _, opt := range strings.Split(opts, ",") {
		if strings.TrimSpace(opt) == "" {
			continue
		}
		k, v, ok := strings.Cut(opt, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok {
			return t, fmt.Errorf("--tenants %s: option %q: want OPT=VALUE", t.Name, opt)
		}
		if err := t.set(k, v); err != nil {
			return t, fmt.Errorf("--tenants %s: %s=%s: %w", t.Name, k, v, err)
		}
	}
	switch {
	case t.Mode != ModeBurst && t.Mode != ModeSerial && t.Mode != ModeFlood:
		return t, fmt.Errorf("--tenants %s: mode %q: want burst, serial or flood", t.Name, t.Mode)
	case t.Mode == ModeFlood && t.Clients < 1, t.Mode != ModeFlood && t.Requests < 1:
		return t, fmt.Errorf("--tenants %s: mode %s needs clients=N (flood) or requests=N (burst, serial) of at least 1", t.Name, t.Mode)
	case t.MaxTokens < 1:
		return t, fmt.Errorf("--tenants %s: max-tokens must be positive", t.Name)
	}
	return t, nil
}

// set applies one option.
func (t *Tenant) set(k, v string) error {
	var err error
	switch k {
	case "mode":
		t.Mode = v
	case "key":
		t.Key = v
	case "class":
		t.Class, err = queue.ParseClass(v)
	case "weight":
		if t.Weight, err = strconv.ParseFloat(v, 64); err == nil {
			err = queue.CheckWeight(t.Weight)
		}
	case "requests":
		t.Requests, err = strconv.Atoi(v)
	case "clients":
		t.Clients, err = strconv.Atoi(v)
	case "max-tokens":
		t.MaxTokens, err = strconv.Atoi(v)
	default:
		err = fmt.Errorf("unknown option: want mode, requests, clients, class, weight, max-tokens or key")
	}
	return err
}

// keySpec is the tenant's --api-key value for a server bench load starts:
// its key with its class and weight.
func (t Tenant) keySpec() string {
	s := t.Name + "=" + t.Key + " class=" + t.Class.String()
	if t.Weight > 0 {
		s += " weight=" + strconv.FormatFloat(t.Weight, 'g', -1, 64)
	}
	return s
}
