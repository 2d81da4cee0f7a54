// Command volumehelper is what local-path-provisioner's helper pods run on the local control
// plane's real nodes (its config's setupCommand and teardownCommand): it makes a volume's
// directory (-a create), open to any user as the provisioner's own setup script makes it, or
// removes it (-a delete). One static binary, so that its image needs nothing else.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	path := flag.String("p", "", "the volume's directory (absolute)")
	action := flag.String("a", "", "create or delete")
	// The provisioner passes these too; a directory has no size, and its mode is the
	// volume's (Filesystem), not a file mode.
	flag.String("s", "", "the volume's size in bytes (unused)")
	flag.String("m", "", "the volume's mode (unused)")
	flag.Parse()
	if err := run(*path, *action); err != nil {
		fmt.Fprintf(os.Stderr, "volumehelper: %v\n", err)
		os.Exit(1)
	}
}

func run(path, action string) error {
	clean := filepath.Clean(path)
	// Never the root or a relative path: delete removes the whole tree.
	if !filepath.IsAbs(clean) || clean == "/" || filepath.Dir(clean) == "/" {
		return fmt.Errorf("refusing the volume path %q", path)
	}
	switch action {
	case "create":
		if err := os.MkdirAll(clean, 0o777); err != nil {
			return err
		}
		// MkdirAll's mode is cut by the umask; the pods' users are not root.
		if err := os.Chmod(clean, 0o777); err != nil {
			return err
		}
		fmt.Printf("created %s\n", clean)
	case "delete":
		if err := os.RemoveAll(clean); err != nil {
			return err
		}
		fmt.Printf("deleted %s\n", clean)
	default:
		return fmt.Errorf("unknown action %q (create or delete)", action)
	}
	return nil
}
