// Package ident is the identity kvwin keeps state under: a tenant's
// conversation. The KV registry (kvcache.Owner) and the memory
// (memory.Key) key by it, and so does everything that forgets, snapshots
// or limits a conversation.
package ident

import "fmt"

// Owner is a conversation of a tenant: the unit whose KV, snapshots and
// remembered turns are kept, found and forgotten together. Tenant is never
// empty on a server with keys; Conversation is empty for an unnamed chat.
type Owner struct {
	Tenant       string
	Conversation string
}

// String is "tenant/conversation", for logs.
func (o Owner) String() string { return fmt.Sprintf("%s/%s", o.Tenant, o.Conversation) }
