package memory

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const childEnv = "KVWIN_MEMORY_KILL_CHILD"

// TestStoreSurvivesKill runs this test binary again as a child that ingests
// turns and prints "ack N" after each Ingest returns, kills it with SIGKILL
// mid-stream, reopens the store and checks that every acknowledged turn is
// there and retrievable.
func TestStoreSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoreKillChild$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	acked := map[int]bool{}
	killed := false
	deadline := time.After(3 * time.Minute)
	for line := range orDeadline(t, lines, deadline) {
		if n, ok := strings.CutPrefix(line, "ack "); ok {
			i, _ := strconv.Atoi(n)
			acked[i] = true
		} else if strings.HasPrefix(line, "error") {
			t.Fatalf("child: %s", line)
		}
		if len(acked) == 150 && !killed {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = true // keep reading: acks already in the pipe count too
		}
	}
	_ = cmd.Wait()
	if !killed {
		t.Fatalf("child ended after %d acks without being killed", len(acked))
	}

	s := openStore(t, dir) // the kernel released the dead child's lock
	key := Key{Tenant: "t", Conversation: "killed"}
	turns, err := s.Turns(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[int]bool{}
	for _, tr := range turns {
		stored[tr.Pos] = true
	}
	for i := range acked {
		if !stored[i] {
			t.Fatalf("acknowledged turn %d lost (%d acked, %d stored)", i, len(acked), len(stored))
		}
	}
	chain := []uint64{0} // the child's history: Chain[i] covers its first i turns
	for i := 0; i < len(stored); i += 3 {
		batch, _ := Linked(chain[len(chain)-1], killBatch(i))
		for _, b := range batch {
			chain = append(chain, b.Chain())
		}
	}
	hits, err := s.Search(context.Background(), key, Query{Ask: "What is the code of batch 42?", Chain: chain})
	if err != nil || len(hits) == 0 || !strings.Contains(hits[0].Text, "batch 42 ") {
		t.Fatalf("after the kill, search finds %v, %v", hitTexts(hits), err)
	}
	t.Logf("%d turns acknowledged before SIGKILL, %d stored", len(acked), len(stored))
}

// orDeadline forwards lines until the channel closes or the deadline passes.
func orDeadline(t *testing.T, in <-chan string, deadline <-chan time.Time) <-chan string {
	out := make(chan string)
	go func() {
		defer close(out)
		for {
			select {
			case l, ok := <-in:
				if !ok {
					return
				}
				out <- l
			case <-deadline:
				t.Error("child did not finish in time")
				return
			}
		}
	}()
	return out
}

// TestStoreKillChild is the child of TestStoreSurvivesKill; it does nothing
// in a normal run.
func TestStoreKillChild(t *testing.T) {
	dir := os.Getenv(childEnv)
	if dir == "" {
		t.Skip("child process of TestStoreSurvivesKill")
	}
	s, err := Open(StoreConfig{Dir: dir})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	key := Key{Tenant: "t", Conversation: "killed"}
	var chain uint64
	for i := 0; i < 100000; i += 3 {
		var batch []Turn
		batch, chain = Linked(chain, killBatch(i))
		if _, err := s.Ingest(context.Background(), key, batch); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		for _, b := range batch {
			fmt.Printf("ack %d\n", b.Pos)
		}
	}
	os.Exit(0)
}

// killBatch is the child's batch at position i, unlinked.
func killBatch(i int) []Turn {
	return []Turn{
		{Pos: i, Role: "user", Text: fmt.Sprintf("The code of batch %d is %d.", i, i*7)},
		{Pos: i + 1, Role: "assistant", Text: "Noted."},
		{Pos: i + 2, Role: "user", Text: fmt.Sprintf("Ticket %d moved to review.", i)},
	}
}
