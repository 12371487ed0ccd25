package stats

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// CPUProfile starts a CPU profile written to path, for a bench's
// --cpuprofile; the returned stop ends it and closes the file. An empty
// path profiles nothing (stop does nothing).
func CPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// MemProfile writes the heap's allocations so far (pprof's allocs profile:
// every allocation sampled since the start, by where it was made) to path;
// nothing for "".
func MemProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("memory profile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("memory profile: %w", err)
	}
	return f.Close()
}
