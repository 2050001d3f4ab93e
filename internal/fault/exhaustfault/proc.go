package exhaustfault

import "github.com/gpuchaos/gpuchaos/internal/node/procfind"

// id is the record's identity, for procfind's and childproc's checks.
func (c childRecord) id() procfind.Proc { return procfind.Proc{PID: c.PID, StartTicks: c.StartTicks} }
