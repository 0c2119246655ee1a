//go:build !faultinject

package node

// writeFault is the run-cache write hook of fault injection, which only a build with the
// faultinject tag carries (faultinject.go): none.
func (inst *Instance) writeFault() func() { return nil }
