package app_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
	"kvwin/window/memory/pgtest"
)

// Stored responses on a real server, on SQLite and on PostgreSQL alike:
// input_items pages to its end and an unknown after is a 400 naming it; a
// 200,000-byte id on GET and DELETE is a 404 of bounded size; a repeated
// input item id is a 400 naming it.
func TestStoredResponsesBoundsOnBothStores(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dsn := ""
			if store == "postgres" {
				dsn = pgtest.Schema(t)
			}
			a := apptest.Start(t, func(f *app.Config) { f.Window, f.WindowBudget, f.MemoryStore = "memory", 1024, dsn })
			post := func(body string) (int, string) {
				status, _, b := send(t, "POST", a.URL()+"/v1/responses", "application/json", body, nil)
				return status, b
			}
			status, body := post(`{"input":[{"id":"m1","role":"user","content":"a"},{"id":"m1","role":"user","content":"b"}],"max_output_tokens":16}`)
			if e := apptest.DecodeError(t, []byte(body)).Error; status != 400 || e.Param != "input[1].id" {
				t.Fatalf("a repeated item id: %d %s", status, body)
			}
			status, body = post(`{"input":[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}],"max_output_tokens":16}`)
			var r struct{ ID string }
			if status != 200 || json.Unmarshal([]byte(body), &r) != nil {
				t.Fatalf("post: %d %s", status, body)
			}
			seen, after := 0, ""
			for pages := 1; ; pages++ {
				if pages > 3 {
					t.Fatalf("a fourth page of one item for 3 items")
				}
				path := fmt.Sprintf("/v1/responses/%s/input_items?limit=1", r.ID)
				if after != "" {
					path += "&after=" + after
				}
				status, _, b := send(t, "GET", a.URL()+path, "", "", nil)
				var list struct {
					Data    []json.RawMessage
					LastID  string `json:"last_id"`
					HasMore bool   `json:"has_more"`
				}
				if status != 200 || json.Unmarshal([]byte(b), &list) != nil {
					t.Fatalf("%s: %d %s", path, status, b)
				}
				seen += len(list.Data)
				if !list.HasMore {
					break
				}
				after = list.LastID
			}
			if seen != 3 {
				t.Fatalf("paged %d items, want 3", seen)
			}
			status, _, body = send(t, "GET", a.URL()+"/v1/responses/"+r.ID+"/input_items?after=nope", "", "", nil)
			if e := apptest.DecodeError(t, []byte(body)).Error; status != 400 || e.Param != "after" {
				t.Fatalf("an unknown after: %d %s", status, body)
			}
			long := strings.Repeat("x", 200_000)
			for _, method := range []string{"GET", "DELETE"} {
				status, _, body = send(t, method, a.URL()+"/v1/responses/"+long, "", "", nil)
				if e := apptest.DecodeError(t, []byte(body)).Error; status != 404 || e.Code != "response_not_found" || len(body) > 1000 {
					t.Fatalf("%s of a 200,000-byte id: %d, a %d-byte answer: %.300s", method, status, len(body), body)
				}
			}
		})
	}
}
