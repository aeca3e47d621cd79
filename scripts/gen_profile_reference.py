"""Print docs/profile-reference.md (run through `make docs`)."""

from stackpin.profile.docgen import profile_reference

print(profile_reference(), end="")
