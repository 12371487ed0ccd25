package app

import (
	"path/filepath"
	"syscall"
)

// The disk tier's budget (--snapshot-max-bytes; docs/serve.md). Unset
// (negative), it is an eighth of the space free to kvwin on the filesystem
// that holds --data-dir when kvwin starts, as --kv-ram is an eighth of the
// available RAM, at least minDefaultKVDisk (the fixed budget before this
// rule) and at most maxDefaultKVDisk. A snapshot is the KV of a slot given
// to another conversation while its user thinks: for the default 8B model
// 128 KiB a token, so a 4,096-token slot's is 512 MiB, and 1 GiB held two.
// bench fleet (64 kvwin nodes of 4 slots, default RAM tier) measured what
// the disk tier's size does: at load 0.2 the returns whose snapshot was
// gone went from 0.09× of the oracle's prefill at 1 GiB to none from 8
// GiB on; at load 1.0 the prefill went from 4.22× the oracle's at 1 GiB
// to 2.17× at 16 GiB and 2.01× at 64 GiB. The cap is where more disk
// stops paying for itself on that workload (docs/fleet.md). With several
// models (a models: configuration) each model's store has this budget.

const (
	minDefaultKVDisk = 1 << 30
	maxDefaultKVDisk = 16 << 30
)

// kvDiskBytes is the disk tier's budget for the setting f (bytes; <0: the
// default rule, for the filesystem holding dir or, while dir does not
// exist yet, its nearest existing parent).
func kvDiskBytes(f int64, dir string) int64 {
	if f >= 0 {
		return f
	}
	free, ok := freeBytes(dir)
	if !ok {
		return minDefaultKVDisk
	}
	return defaultKVDisk(free)
}

// defaultKVDisk applies the default rule to free bytes.
func defaultKVDisk(free int64) int64 {
	return min(max(free/8, minDefaultKVDisk), maxDefaultKVDisk)
}

// freeBytes is the space free to an unprivileged user on the filesystem
// holding dir, or its nearest existing parent.
func freeBytes(dir string) (int64, bool) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return 0, false
	}
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			return int64(st.Bavail) * int64(st.Bsize), true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return 0, false
		}
		dir = parent
	}
}
