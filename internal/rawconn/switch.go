package rawconn

import "sync/atomic"

// off is set by SetEnabled(false): Wrap then returns every connection as it
// is, as the net package made it.
var off atomic.Bool

// SetEnabled turns raw reads and writes on (the default) or off for every
// connection Wrap and Listener wrap from now on; connections already wrapped
// keep theirs. idemd's --raw-sockets sets it, so that an operator can go
// back to the net package's system calls without a new build.
func SetEnabled(on bool) { off.Store(!on) }
