package crypto

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// keyringFileName is the keyring's name inside the data dir.
const keyringFileName = "keyring"

// maxKeyringFile bounds how much of a keyring file is read; a real one is a few
// hundred bytes per key.
const maxKeyringFile = 1 << 20

// ErrNoKeyring: no keyring is configured and none exists in the data directory (and LoadOptions
// did not ask to generate one).
var ErrNoKeyring = errors.New("crypto: no keyring")

// LoadOptions says where LoadKeyring looks, in precedence order: Env, File, then the
// keyring in DataDir (generated there on first use if Generate is set).
type LoadOptions struct {
	Env      string // value of COMPACTD_KEYS (ParseKeyring text); used if non-empty
	File     string // path of a keyring file (ParseKeyring text); used if non-empty
	DataDir  string // where to persist a generated keyring: DataDir/keyring, file 0600, dir 0700; "" = DefaultDataDir()
	Generate bool   // generate+persist when neither Env nor File is given and DataDir/keyring is absent
}

// Source reports where a keyring came from, for the startup log line (never the keys).
type Source struct {
	Kind      string // "env" | "file" | "data-dir" | "generated"
	Path      string // file path for "file", "data-dir" and "generated"
	Generated bool   // true when this call created the keyring
}

// LoadKeyring loads the keyring from the first configured source. Key files (and the
// data-dir keyring) must not be accessible by group or others: sealing keys are as
// sensitive as an SSH private key, so a loose file is an error, not a warning.
// A generated keyring is written atomically and never overwrites an existing one, so
// two processes starting at once end up with the same keys.
func LoadKeyring(o LoadOptions) (*Keyring, Source, error) {
	if o.Env != "" {
		r, err := ParseKeyring(o.Env)
		if err != nil {
			return nil, Source{}, fmt.Errorf("COMPACTD_KEYS: %w", err)
		}
		return r, Source{Kind: "env"}, nil
	}
	if o.File != "" {
		r, err := readKeyringFile(o.File)
		if err != nil {
			return nil, Source{}, err
		}
		return r, Source{Kind: "file", Path: o.File}, nil
	}
	dir := o.DataDir
	if dir == "" {
		dir = DefaultDataDir()
		if dir == "" {
			return nil, Source{}, errors.New("crypto: no keyring configured and no data dir (set COMPACTD_KEYS, a key file, or a data dir)")
		}
	}
	path := filepath.Join(dir, keyringFileName)
	r, err := readKeyringFile(path)
	switch {
	case err == nil:
		return r, Source{Kind: "data-dir", Path: path}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, Source{}, err
	case !o.Generate:
		return nil, Source{}, fmt.Errorf("%w: none configured and %s does not exist (set COMPACTD_KEYS or a key file)", ErrNoKeyring, path)
	}
	r, created, err := generateKeyringFile(dir, path)
	if err != nil {
		return nil, Source{}, err
	}
	if !created { // another process won the race; use its keyring
		return r, Source{Kind: "data-dir", Path: path}, nil
	}
	return r, Source{Kind: "generated", Path: path, Generated: true}, nil
}

// readKeyringFile reads and parses a keyring file after checking its permissions.
func readKeyringFile(path string) (*Keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("crypto: keyring file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("crypto: keyring file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("crypto: keyring file %s is not a regular file", path)
	}
	// Unix permission bits mean nothing on Windows, where ACLs decide.
	if runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("crypto: keyring file %s is accessible by group or others (mode %04o); run: chmod 600 %s",
			path, st.Mode().Perm(), path)
	}
	buf, err := io.ReadAll(io.LimitReader(f, maxKeyringFile+1))
	defer clear(buf)
	if err != nil {
		return nil, fmt.Errorf("crypto: keyring file %s: %w", path, err)
	}
	if len(buf) > maxKeyringFile {
		return nil, fmt.Errorf("crypto: keyring file %s is larger than %d bytes", path, maxKeyringFile)
	}
	r, err := ParseKeyring(string(buf))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// generateKeyringFile creates a one-key keyring at path. It writes a private temp file
// and hard-links it into place, so readers never see a partial file and an existing
// keyring (from a concurrent start) is never replaced; created is false in that case
// and the existing keyring is returned.
func generateKeyringFile(dir, path string) (r *Keyring, created bool, err error) {
	if err := ensurePrivateDir(dir); err != nil {
		return nil, false, err
	}
	k, err := GenerateKey()
	if err != nil {
		return nil, false, err
	}
	r, err = NewKeyring(k)
	clear(k.Secret[:])
	if err != nil {
		return nil, false, err
	}
	text := "# compactd keyring, generated on first start. Keep it private (chmod 600) and back it up:\n" +
		"# losing it makes every compaction item clients hold unreadable.\n" + r.String()

	tmp, err := os.CreateTemp(dir, ".keyring-*") // created 0600
	if err != nil {
		return nil, false, fmt.Errorf("crypto: create keyring: %w", err)
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName)
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("crypto: create keyring: %w", err)
	}
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("crypto: write keyring: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return nil, false, fmt.Errorf("crypto: write keyring: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, false, fmt.Errorf("crypto: write keyring: %w", err)
	}
	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			existing, rerr := readKeyringFile(path)
			return existing, false, rerr
		}
		return nil, false, fmt.Errorf("crypto: install keyring: %w", err)
	}
	syncDir(dir)
	return r, true, nil
}

// ensurePrivateDir creates dir with mode 0700 if it is missing. An existing directory
// is left alone: it may be shared on purpose, and the keyring file itself is 0600.
func ensurePrivateDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("crypto: create data dir: %w", err)
	}
	// MkdirAll applies the umask; make sure the leaf is exactly 0700.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("crypto: create data dir: %w", err)
	}
	return nil
}

// syncDir makes the new directory entry durable; best effort, as not every platform
// can fsync a directory.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// DefaultDataDir is $XDG_DATA_HOME/compactd, else $HOME/.local/share/compactd, or ""
// when neither is known. A relative XDG_DATA_HOME is ignored, as the XDG spec says.
func DefaultDataDir() string {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "compactd")
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		return filepath.Join(home, ".local", "share", "compactd")
	}
	return ""
}
