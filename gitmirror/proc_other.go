//go:build !unix

package gitmirror

import "os/exec"

// ownProcessGroup leaves git to exec's default cancellation (killing git alone) where process
// groups do not exist.
func ownProcessGroup(cmd *exec.Cmd) {}
