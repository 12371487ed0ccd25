package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"kvwin/engine"
	"kvwin/engine/llamacpp"
	"kvwin/router"
	"kvwin/web"
	"kvwin/web/core"
	"kvwin/window"
	"kvwin/window/memory"
)

// loadKeys reads --api-key and --api-key-file into key → tenant and key →
// policy, and checks that a server without keys listens only on loopback
// unless --no-auth says otherwise. Errors name the flag and line, never
// the key.
//
// Each is TENANT=KEY, then optionally, separated by spaces, the key's
// class=interactive|batch, weight=W and tpm=N (web.ParseKeyOptions;
// docs/tenants.md). A key never holds white space, so a line of the older
// format means what it meant.
func loadKeys(f Config) (map[string]string, map[string]web.KeyPolicy, error) {
	keys, policies := map[string]string{}, map[string]web.KeyPolicy{}
	add := func(where, spec string) error {
		tenant, rest, ok := strings.Cut(strings.TrimSpace(spec), "=")
		tenant, fields := strings.TrimSpace(tenant), strings.Fields(rest)
		if !ok || tenant == "" || len(fields) == 0 {
			return fmt.Errorf("%s: want TENANT=KEY [class=interactive|batch] [weight=W] [tpm=N]", where)
		}
		key := fields[0]
		switch {
		case !web.ValidTenant(tenant):
			return fmt.Errorf("%s: tenant name %q: want 1-64 letters, digits, '.', '_' or '-'", where, tenant)
		case keys[key] != "":
			return fmt.Errorf("%s: the key of tenant %s is also tenant %s's", where, tenant, keys[key])
		}
		p, err := web.ParseKeyOptions(fields[1:])
		if err != nil {
			return fmt.Errorf("%s: tenant %s: %w", where, tenant, err)
		}
		keys[key], policies[key] = tenant, p
		return nil
	}
	for i, spec := range f.APIKeys {
		if err := add(fmt.Sprintf("--api-key #%d", i+1), spec); err != nil {
			return nil, nil, err
		}
	}
	if f.APIKeyFile != "" {
		file, err := os.Open(f.APIKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("--api-key-file: %w", err)
		}
		defer file.Close()
		sc := bufio.NewScanner(file)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if err := add(fmt.Sprintf("--api-key-file %s line %d", f.APIKeyFile, n), line); err != nil {
				return nil, nil, err
			}
		}
		if err := sc.Err(); err != nil {
			return nil, nil, fmt.Errorf("--api-key-file %s: %w", f.APIKeyFile, err)
		}
	}
	if len(keys) == 0 && f.AdminKey == "" && !f.NoAuth && !loopbackAddr(f.Addr) {
		return nil, nil, fmt.Errorf("--addr %s is reachable from other machines and no key is configured: give --api-key or --admin-key, or --no-auth to serve everyone as one tenant", f.Addr)
	}
	return keys, policies, nil
}

// loopbackAddr reports whether a listen address binds only the loopback
// interface ("127.0.0.1:8080", "[::1]:8080", "localhost:8080"). An empty
// host (":8080") binds every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// conversationDeleter deletes a conversation's stored turns; the window
// does, through its memory store.
type conversationDeleter interface {
	Delete(ctx context.Context, key memory.Key) (bool, error)
}

var (
	_ conversationDeleter          = (*window.Window)(nil)
	_ engine.ConversationForgetter = (*llamacpp.Engine)(nil)
	_ engine.ConversationForgetter = (*router.Router)(nil)
)

// forgetter serves DELETE /kvwin/v1/conversations/{id}: the conversation's
// turns leave the memory store and its snapshots leave the backend. It
// exists when anything keeps a conversation's state.
func (a *App) forgetter(w *window.Window) web.Forgetter {
	var turns conversationDeleter
	if w != nil {
		turns = w
	}
	snaps, _ := engine.As[engine.ConversationForgetter](a.backend)
	if turns == nil && snaps == nil {
		return nil
	}
	return web.ForgetFunc(func(ctx context.Context, tenant, conversation string) (bool, error) {
		found := false
		var errs []error
		if turns != nil {
			ok, err := turns.Delete(ctx, memory.Key{Tenant: tenant, Conversation: conversation})
			found = found || ok
			if err != nil {
				// The store's error names the database: logged, not sent.
				a.log.WarnContext(ctx, "conversation's stored turns not deleted", "tenant", tenant, "err", err)
				err = fmt.Errorf("%w: the conversation's stored turns cannot be deleted now", core.ErrMemoryUnavailable)
			}
			errs = append(errs, err)
		}
		if snaps != nil {
			n, err := snaps.ForgetConversation(ctx, tenant, conversation)
			found = found || n > 0
			errs = append(errs, err)
		}
		return found, errors.Join(errs...)
	})
}
