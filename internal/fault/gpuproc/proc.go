package gpuproc

import "github.com/gpuchaos/gpuchaos/internal/procfind"

// id is the record's identity, for procfind's and childproc's checks.
func (c childRecord) id() procfind.Proc { return procfind.Proc{PID: c.PID, StartTicks: c.StartTicks} }

// running reports whether the recorded child still runs: the pid exists,
// has the recorded start time (so it was not reused) and is not a zombie
// (a zombie is dead; only its exit status waits for its parent).
func running(c childRecord) (bool, error) { return c.id().Alive() }
