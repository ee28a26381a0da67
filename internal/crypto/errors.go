package crypto

import "errors"

// Open/Verify failure classes. Every error returned by Open or Verify wraps exactly
// one of these, so callers can branch with errors.Is and metrics can label with Reason.
var (
	// ErrMalformed: not something this package produced (bad base64, too short or too
	// long, unknown envelope version, invalid key id).
	ErrMalformed = errors.New("crypto: malformed sealed data")
	// ErrUnknownKey: well-formed, but names a key id that is not in the keyring
	// (typically a key that was rotated out, or a blob from another deployment).
	ErrUnknownKey = errors.New("crypto: unknown key id")
	// ErrWrongTenant: sealed for a different tenant than the one presenting it. The
	// tenant tag is keyed, so a blob from another deployment whose key happens to
	// share this key's id lands here too; the two cannot be told apart.
	ErrWrongTenant = errors.New("crypto: sealed for another tenant")
	// ErrTampered: authentication failed (modified bytes, or moved to another item
	// id or kind).
	ErrTampered = errors.New("crypto: authentication failed")
)

// ErrTooLarge is returned by Seal when the sealed blob would exceed MaxBlobLen, which
// the client could never send back.
var ErrTooLarge = errors.New("crypto: sealed blob would exceed MaxBlobLen")

// MaxBlobLen is OpenAI's limit on encrypted_content. Open rejects longer input as
// ErrMalformed before decoding it, and Seal refuses to produce anything longer.
const MaxBlobLen = 20_971_520

// Reason maps an error to a bounded metric label: "malformed", "unknown_key",
// "wrong_tenant", "tampered", "" for nil, and "other" for errors that did not come
// from Open or Verify.
func Reason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrMalformed):
		return "malformed"
	case errors.Is(err, ErrUnknownKey):
		return "unknown_key"
	case errors.Is(err, ErrWrongTenant):
		return "wrong_tenant"
	case errors.Is(err, ErrTampered):
		return "tampered"
	default:
		return "other"
	}
}
