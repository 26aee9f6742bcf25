package config

import (
	"strings"

	"github.com/idemgate/idemgate/internal/vocab"
)

// OpsSubject is one entry of IDEMGATE_OPS_SUBJECTS: an access token
// subject, and the issuer that must have issued it ("" for any: the
// deployment trusts one issuer, IDEMGATE_OAUTH_ISSUER).
type OpsSubject struct {
	Issuer  string
	Subject string
}

// OperatorSubjects returns OpsSubjects as a list; nil when it is empty or
// invalid (Validate reports why).
func (c *Config) OperatorSubjects() []OpsSubject {
	out, _ := parseOpsSubjects(c.OpsSubjects, c.OAuthIssuer)
	return out
}

// parseOpsSubjects reads a comma-separated list of SUB or ISSUER#SUB. An
// entry that starts with http:// or https:// is qualified: the issuer ends
// at its first '#' (an issuer URL has no fragment), the subject follows.
// A qualified entry's issuer must be issuer.
func parseOpsSubjects(list, issuer string) ([]OpsSubject, *SettingError) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	if issuer == "" {
		return nil, settingErr(EnvOpsSubjects, "is set but %s is not: operator subjects are OAuth access token subjects "+
			"(with idemgate's own tokens, operators use idemctl token create --operator or the Basic credentials)", EnvOAuthIssuer)
	}
	var out []OpsSubject
	for i, entry := range strings.Split(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			return nil, settingErr(EnvOpsSubjects, "entry %d is empty (want SUB or ISSUER#SUB, comma-separated)", i+1)
		}
		s := OpsSubject{Subject: entry}
		if strings.HasPrefix(entry, "https://") || strings.HasPrefix(entry, "http://") {
			iss, sub, ok := strings.Cut(entry, "#")
			if !ok {
				return nil, settingErr(EnvOpsSubjects, "entry %d %q starts with an issuer URL but has no #SUB after it "+
					"(a subject that is itself a URL is written ISSUER#SUB)", i+1, entry)
			}
			if iss != issuer {
				return nil, settingErr(EnvOpsSubjects, "entry %d names the issuer %q, but %s is %q: its tokens are never accepted",
					i+1, iss, EnvOAuthIssuer, issuer)
			}
			s = OpsSubject{Issuer: iss, Subject: sub}
		}
		if err := vocab.CheckIdentity("sub", s.Subject); err != nil {
			return nil, settingErr(EnvOpsSubjects, "entry %d: the subject is not an id (%s): it %s",
				i+1, vocab.IdentityRule, err.(*vocab.IdentityError).Reason)
		}
		out = append(out, s)
	}
	return out, nil
}
