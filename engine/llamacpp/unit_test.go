package llamacpp

import (
	"strings"
	"testing"
	"unicode/utf8"

	"kvwin/kvcache"
)

func TestPlace(t *testing.T) {
	seq := func(n int, base int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = base + i
		}
		return s
	}
	prompt := seq(100, 0)
	other := append(seq(40, 0), seq(60, 1000)...) // shares 40 tokens with prompt
	tests := []struct {
		name    string
		slots   []slotView
		pinned  int
		noCache bool
		want    placement
	}{
		{"empty slots: first one, nothing reused",
			[]slotView{{}, {}}, -1, false, placement{target: 0, source: -1, reuse: 0}},
		{"the slot holding the conversation continues it",
			[]slotView{{}, {tokens: seq(80, 0), prompt: 70}}, -1, false, placement{target: 1, source: -1, reuse: 80}},
		{"the next turn continues its slot even where the answer was re-sent differently",
			[]slotView{{}, {tokens: append(seq(70, 0), 5000, 5001), prompt: 70}}, -1, false, placement{target: 1, source: -1, reuse: 70}},
		{"a slot holding more than the prompt: reuse all but the last prompt token",
			[]slotView{{tokens: seq(150, 0), prompt: 150}}, -1, false, placement{target: 0, source: -1, reuse: 99}},
		{"another conversation sharing a prefix is forked into a free slot, not overwritten",
			[]slotView{{tokens: other, prompt: 80}, {}}, -1, false, placement{target: 1, source: 0, reuse: 40}},
		{"even when the shared prefix is most of that slot",
			[]slotView{{tokens: append(seq(40, 0), 7777, 7778), prompt: 41}, {}}, -1, false, placement{target: 1, source: 0, reuse: 40}},
		{"fork from a busy slot",
			[]slotView{{tokens: seq(90, 0), prompt: 90, busy: true}, {}}, -1, false, placement{target: 1, source: 0, reuse: 90}},
		{"all idle slots hold other conversations: least recently used is taken",
			[]slotView{{tokens: seq(50, 500), prompt: 50, lastUsed: 5}, {tokens: seq(50, 700), prompt: 50, lastUsed: 2}, {tokens: seq(50, 900), prompt: 50, lastUsed: 9}}, -1, false,
			placement{target: 1, source: -1, reuse: 0}},
		{"LRU target still forks the best prefix",
			[]slotView{{tokens: other, prompt: 100, lastUsed: 5, busy: true}, {tokens: seq(50, 700), prompt: 50, lastUsed: 2}}, -1, false,
			placement{target: 1, source: 0, reuse: 40}},
		{"pinned slot gets the prefix forked in",
			[]slotView{{tokens: seq(60, 0), prompt: 60}, {tokens: seq(10, 300), prompt: 10}}, 1, false, placement{target: 1, source: 0, reuse: 60}},
		{"no cache: an empty slot, nothing reused",
			[]slotView{{tokens: seq(80, 0)}, {}}, -1, true, placement{target: 1, source: -1, reuse: 0}},
		{"no cache and no empty slot: LRU, nothing reused",
			[]slotView{{tokens: seq(80, 0), prompt: 80, lastUsed: 3}, {tokens: seq(5, 0), prompt: 5, lastUsed: 1}}, -1, true, placement{target: 1, source: -1, reuse: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lcp := make([]int, len(tt.slots))
			for i, s := range tt.slots {
				lcp[i] = min(kvcache.SharedPrefix(s.tokens, prompt), len(prompt)-1)
			}
			if got := place(tt.slots, lcp, len(prompt)-1, 1, tt.pinned, tt.noCache); got != tt.want {
				t.Fatalf("place = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTextDecoderNeverSplitsUTF8(t *testing.T) {
	tests := []struct {
		name   string
		pieces []string
		want   []string // what each feed returns
		flush  string
	}{
		{"ascii", []string{"a", "b"}, []string{"a", "b"}, ""},
		{"euro sign in three pieces", []string{"\xe2", "\x82", "\xac!"}, []string{"", "", "€!"}, ""},
		{"emoji in two pieces", []string{"\xf0\x9f", "\x98\x80"}, []string{"", "😀"}, ""},
		{"stray continuation byte", []string{"\x80a"}, []string{"\uFFFDa"}, ""},
		{"lead byte followed by ascii", []string{"\xe2", "a"}, []string{"", "\uFFFDa"}, ""},
		{"incomplete at the end", []string{"x\xe2\x82"}, []string{"x"}, "\uFFFD\uFFFD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d textDecoder
			for i, p := range tt.pieces {
				got := d.feed(p)
				if got != tt.want[i] {
					t.Fatalf("feed(%q) = %q, want %q", p, got, tt.want[i])
				}
				if !utf8.ValidString(got) {
					t.Fatalf("feed(%q) returned invalid UTF-8 %q", p, got)
				}
			}
			if got := d.flush(); got != tt.flush {
				t.Fatalf("flush = %q, want %q", got, tt.flush)
			}
		})
	}
}

func TestStopMatcher(t *testing.T) {
	tests := []struct {
		name    string
		stops   []string
		pieces  []string
		emitted string
		stopped bool
		matched string // the stop string the matcher names
	}{
		{"no stops", nil, []string{"ab", "cd"}, "abcd", false, ""},
		{"stop inside one piece", []string{"END"}, []string{"abENDcd"}, "ab", true, "END"},
		{"stop across pieces is never partly emitted", []string{"END"}, []string{"ab", "E", "N", "Dx"}, "ab", true, "END"},
		{"held prefix released when it does not match", []string{"END"}, []string{"abE", "Nx"}, "abENx", false, ""},
		{"earliest of several stops", []string{"zz", "c"}, []string{"abczz"}, "ab", true, "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := stopMatcher{stops: tt.stops}
			var out strings.Builder
			stopped := false
			for _, p := range tt.pieces {
				s, st := m.push(p)
				out.WriteString(s)
				if st {
					stopped = true
					break
				}
			}
			if !stopped {
				out.WriteString(m.flush())
			}
			if out.String() != tt.emitted || stopped != tt.stopped || m.matched != tt.matched {
				t.Fatalf("emitted %q stopped %v matched %q, want %q %v %q", out.String(), stopped, m.matched, tt.emitted, tt.stopped, tt.matched)
			}
		})
	}
}
