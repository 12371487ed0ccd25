package app_test

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"kvwin/cmd/kvwin/app"
	"kvwin/cmd/kvwin/app/apptest"
)

// Everything kvwin creates under --data-dir — the test model, the memory
// store (memory.db, its -wal, -shm and lock), KV snapshots and their
// directories — is its user's only, whatever the umask: files 0600,
// directories 0700.
func TestDataDirIsPrivateWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0) // the loosest: every mode as asked
	t.Cleanup(func() { syscall.Umask(old) })
	dir := filepath.Join(t.TempDir(), "data")
	a := apptest.Start(t, func(f *app.Config) {
		f.DataDir, f.Model, f.Slots, f.Ctx, f.Window, f.WindowBudget = dir, "", 1, 2048, "memory", 1500
	})
	// Evicted turns go to the memory store; a second conversation takes the
	// slot, so the first one's KV is saved as a snapshot.
	if tr := apptest.PostWith(t, a.URL(), map[string]string{"X-Conversation-Id": "M"}, map[string]any{"messages": secretHistory(), "max_tokens": 2}); tr.Status != 200 {
		t.Fatalf("M: %d %s", tr.Status, tr.Body)
	}
	if tr := apptest.Post(t, a, map[string]any{"messages": apptest.Msgs("user", apptest.Words(3, 900)), "max_tokens": 2}); tr.Status != 200 {
		t.Fatalf("other: %d %s", tr.Status, tr.Body)
	}
	a.Engine().ExpireSnapshots() // waits for the save
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
		seen[filepath.Ext(p)] = true
		seen[filepath.Base(p)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"memory.db", "memory.db-wal", ".kvsnap", ".gguf", "snapshots"} {
		if !seen[want] {
			t.Errorf("no %s under the data dir: the test did not see what it checks (%v)", want, seen)
		}
	}
}
