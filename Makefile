# Builds and installs tiermem: the `tiermem` binary, libtiermem.so with its
# header and pkg-config file, man pages and shell completions.
#
#   make                                  # cargo build --release, as yourself
#   sudo make install                     # into /usr/local, building nothing
#   make install PREFIX=$HOME/.local      # no root needed
#   make install DESTDIR=/tmp/stage PREFIX=/usr   # staged, for a package
#   make uninstall PREFIX=...             # the same variables as install
#
# `install` builds only what is missing, so `sudo make install` after `make`
# does not run cargo as root; `make` again after changing the sources.
# `tiermem` finds libtiermem.so from its own path: LIBDIR must be
# BINDIR/../lib (the default), BINDIR/../lib64 or BINDIR/../lib/<arch>-linux-gnu,
# or the library must be named by TIERMEM_LIB at run time.

PREFIX ?= /usr/local
EXEC_PREFIX ?= $(PREFIX)
BINDIR ?= $(EXEC_PREFIX)/bin
LIBDIR ?= $(EXEC_PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
DATAROOTDIR ?= $(PREFIX)/share
MANDIR ?= $(DATAROOTDIR)/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
BASH_COMPLETIONSDIR ?= $(DATAROOTDIR)/bash-completion/completions
ZSH_COMPLETIONSDIR ?= $(DATAROOTDIR)/zsh/site-functions
FISH_COMPLETIONSDIR ?= $(DATAROOTDIR)/fish/vendor_completions.d
DESTDIR ?=

INSTALL ?= install
INSTALL_PROGRAM ?= $(INSTALL) -m 755
INSTALL_DATA ?= $(INSTALL) -m 644

# Everything is found from this file's directory, so `make -C` and `make -f`
# work from anywhere.
TOP := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
CARGO ?= cargo
CARGO_TARGET_DIR ?= $(TOP)/target
export CARGO_TARGET_DIR
# Where the built binary and library are; tests point it at their own profile.
BUILD_DIR ?= $(CARGO_TARGET_DIR)/release

# The version is the workspace's ([workspace.package] in Cargo.toml).
VERSION := $(shell sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\([^"]*\)".*/\1/p' $(TOP)/Cargo.toml)
VERSION_MAJOR := $(word 1,$(subst ., ,$(VERSION)))
# The SONAME crates/tiermem-capi/build.rs gives the library.
SONAME := libtiermem.so.$(VERSION_MAJOR)
REALNAME := libtiermem.so.$(VERSION)

TIERMEM := $(BUILD_DIR)/tiermem
LIBRARY := $(BUILD_DIR)/libtiermem.so
# The pkg-config file names its directories from ${prefix} where it can, so
# `pkg-config --define-prefix` can move it.
PC_LIBDIR := $(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))
PC_INCLUDEDIR := $(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))

.PHONY: all build install uninstall

all: build

# The SONAME link lets programs linked with -ltiermem against the build tree
# run with LD_LIBRARY_PATH=$(BUILD_DIR).
build:
	$(CARGO) build --release --manifest-path $(TOP)/Cargo.toml -p tiermem-cli -p tiermem-capi
	ln -sf libtiermem.so $(BUILD_DIR)/$(SONAME)

# Built only when missing: see the top of this file.
$(TIERMEM) $(LIBRARY):
	$(CARGO) build --release --manifest-path $(TOP)/Cargo.toml -p tiermem-cli -p tiermem-capi

# Man pages and completions are generated from the CLI definition by the
# built binary, in a scratch directory, so nothing written as root lands in
# the build tree.
install: $(TIERMEM) $(LIBRARY)
	@test -n "$(VERSION)" || { echo "no version in $(TOP)/Cargo.toml" >&2; exit 1; }
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) \
		$(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(BASH_COMPLETIONSDIR) \
		$(DESTDIR)$(ZSH_COMPLETIONSDIR) $(DESTDIR)$(FISH_COMPLETIONSDIR)
	$(INSTALL_PROGRAM) $(TIERMEM) $(DESTDIR)$(BINDIR)/tiermem
	$(INSTALL_PROGRAM) $(LIBRARY) $(DESTDIR)$(LIBDIR)/$(REALNAME)
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libtiermem.so
	$(INSTALL_DATA) $(TOP)/include/tiermem.h $(DESTDIR)$(INCLUDEDIR)/tiermem.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(PC_LIBDIR)|' \
		-e 's|@INCLUDEDIR@|$(PC_INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' \
		$(TOP)/packaging/tiermem.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/tiermem.pc
	chmod 644 $(DESTDIR)$(PKGCONFIGDIR)/tiermem.pc
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(TIERMEM) __man "$$tmp/man" && \
	$(INSTALL_DATA) "$$tmp"/man/*.1 $(DESTDIR)$(MANDIR)/man1/ && \
	$(TIERMEM) completions bash > "$$tmp/bash" && \
	$(TIERMEM) completions zsh > "$$tmp/zsh" && \
	$(TIERMEM) completions fish > "$$tmp/fish" && \
	$(INSTALL_DATA) "$$tmp/bash" $(DESTDIR)$(BASH_COMPLETIONSDIR)/tiermem && \
	$(INSTALL_DATA) "$$tmp/zsh" $(DESTDIR)$(ZSH_COMPLETIONSDIR)/_tiermem && \
	$(INSTALL_DATA) "$$tmp/fish" $(DESTDIR)$(FISH_COMPLETIONSDIR)/tiermem.fish

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/tiermem
	rm -f $(DESTDIR)$(LIBDIR)/libtiermem.so $(DESTDIR)$(LIBDIR)/$(SONAME) \
		$(DESTDIR)$(LIBDIR)/$(REALNAME)
	rm -f $(DESTDIR)$(INCLUDEDIR)/tiermem.h $(DESTDIR)$(PKGCONFIGDIR)/tiermem.pc
	rm -f $(DESTDIR)$(MANDIR)/man1/tiermem.1 $(DESTDIR)$(MANDIR)/man1/tiermem-*.1
	rm -f $(DESTDIR)$(BASH_COMPLETIONSDIR)/tiermem $(DESTDIR)$(ZSH_COMPLETIONSDIR)/_tiermem \
		$(DESTDIR)$(FISH_COMPLETIONSDIR)/tiermem.fish
