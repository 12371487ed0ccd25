package app

import (
	"bufio"
	"io"
	"os"
	"strconv"
	"strings"
)

// The RAM tier's budget (--kv-ram; docs/serve.md). Unset (negative), it is
// an eighth of the host's MemAvailable when kvwin starts, at most
// maxDefaultKVRAM: the model's weights, its KV cache and the memory store
// are loaded after the reading and need most of what was available, and a
// snapshot is worth its RAM only while its conversation may return soon.
// A host that does not say (no /proc/meminfo) gets no RAM tier unless
// --kv-ram says one.

// maxDefaultKVRAM caps the default RAM tier at 4 GiB.
const maxDefaultKVRAM = 4 << 30

// kvRAMBytes is the RAM tier's budget for the setting f (bytes; <0: the
// default rule, read from /proc/meminfo).
func kvRAMBytes(f int64) int64 {
	if f >= 0 {
		return f
	}
	file, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer file.Close()
	return defaultKVRAM(file)
}

// defaultKVRAM applies the default rule to a /proc/meminfo text: an eighth
// of MemAvailable, at most maxDefaultKVRAM; 0 if it says none.
func defaultKVRAM(meminfo io.Reader) int64 {
	sc := bufio.NewScanner(meminfo)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil || kb < 0 {
			return 0
		}
		return min(kb*1024/8, maxDefaultKVRAM)
	}
	return 0
}

// kvRAMShare is --kv-ram-tenant-percent as the store's share (0: its
// default).
func kvRAMShare(percent int) float64 { return float64(percent) / 100 }
