# Builds the C library (and lockctl) with cargo and installs them where C
# programs and their build tools look:
#
#   make && sudo make install
#   make install PREFIX=/usr DESTDIR=/tmp/stage
#
# `make help` lists the targets and the variables.

PREFIX       ?= /usr/local
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
MANDIR       ?= $(PREFIX)/share/man
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR      ?=

CARGO        ?= cargo
CARGO_FLAGS  ?=
INSTALL      ?= install
STRIP        ?= strip
# Run after installing or removing the library when installing as root
# without DESTDIR, so that the loader finds the new SONAME at once.
LDCONFIG     ?= ldconfig

# Where cargo builds: CARGO_TARGET_DIR if given, else what cargo reports (a
# .cargo/config.toml may move it), else cargo's default.
ifeq ($(CARGO_TARGET_DIR),)
CARGO_TARGET_DIR := $(or $(shell $(CARGO) metadata --format-version 1 --no-deps 2>/dev/null | \
                      sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p'),target)
endif
RELEASE := $(CARGO_TARGET_DIR)/release

# What `make` leaves beside the libraries for `make install`: lockffi's
# version, and the system libraries the static library needs as rustc lists
# them for this toolchain and target.
VERSION_FILE       := $(RELEASE)/liblockffi.version
NATIVE_STATIC_LIBS := $(RELEASE)/liblockffi.native-static-libs
BUILD_LOG          := $(RELEASE)/liblockffi.build-log

# The version is Cargo's: `cargo pkgid` ends in "#0.1.0" (or "#lockffi@0.1.0").
# Where cargo cannot run, as under `sudo make install` when root has no Rust
# toolchain of its own, install and uninstall take the build `make` left and
# the version it wrote down.
CARGO_VERSION := $(shell $(CARGO) pkgid -p lockffi 2>/dev/null | sed 's/.*[#@]//')
VERSION       := $(or $(CARGO_VERSION),$(shell cat '$(VERSION_FILE)' 2>/dev/null))
MAJOR         := $(firstword $(subst ., ,$(VERSION)))
# The shared library's file and its SONAME (set by lockffi/build.rs when
# LOCKFFI_SONAME is in its environment).
LIBRARY := liblockffi.so.$(VERSION)
SONAME  := liblockffi.so.$(MAJOR)

HEADERS   := $(wildcard include/*.h)
MAN_PAGES := $(wildcard man/*.[1-9])

cargo_failed = '$(CARGO) pkgid -p lockffi' failed: is cargo on PATH? (CARGO=/path/to/cargo)
need_version = $(if $(VERSION),,$(error $(cargo_failed); nor has make left a build in $(RELEASE)))

# A path below PREFIX as pkg-config writes it, relative to ${prefix}.
pc_path = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))

.PHONY: all install uninstall help previous-build

all:
	$(if $(CARGO_VERSION),,$(error $(cargo_failed)))
	mkdir -p '$(RELEASE)'
	LOCKFFI_SONAME=1 $(CARGO) rustc $(CARGO_FLAGS) --release --target-dir '$(CARGO_TARGET_DIR)' -p lockffi --lib \
	    -- --print native-static-libs 2> '$(BUILD_LOG)'; \
	    status=$$?; cat '$(BUILD_LOG)' >&2; exit $$status
	sed -n 's/^note: native-static-libs: //p' '$(BUILD_LOG)' > '$(NATIVE_STATIC_LIBS)'
	@test -s '$(NATIVE_STATIC_LIBS)' || \
	    { echo "rustc did not list the native libraries of liblockffi.a (no 'native-static-libs' in $(BUILD_LOG))" >&2; exit 1; }
	echo '$(VERSION)' > '$(VERSION_FILE)'
	# Programs linked in place (-Ltarget/release -llockffi) now ask the
	# loader for the SONAME: give them it beside the library.
	ln -sf liblockffi.so '$(RELEASE)/$(SONAME)'
	$(CARGO) build $(CARGO_FLAGS) --release --target-dir '$(CARGO_TARGET_DIR)' -p lockctl

previous-build:
	$(need_version)
	@echo 'cargo cannot run here: installing what make built in $(RELEASE)'

install: $(if $(CARGO_VERSION),all,previous-build)
	$(INSTALL) -d '$(DESTDIR)$(LIBDIR)' '$(DESTDIR)$(INCLUDEDIR)' '$(DESTDIR)$(PKGCONFIGDIR)'
	$(INSTALL) -m 0755 '$(RELEASE)/liblockffi.so' '$(DESTDIR)$(LIBDIR)/$(LIBRARY)'
	ln -sf '$(LIBRARY)' '$(DESTDIR)$(LIBDIR)/$(SONAME)'
	ln -sf '$(LIBRARY)' '$(DESTDIR)$(LIBDIR)/liblockffi.so'
	$(INSTALL) -m 0644 '$(RELEASE)/liblockffi.a' '$(DESTDIR)$(LIBDIR)/liblockffi.a'
	$(STRIP) --strip-debug '$(DESTDIR)$(LIBDIR)/liblockffi.a'
	$(INSTALL) -m 0644 $(HEADERS) '$(DESTDIR)$(INCLUDEDIR)'
	sed -e 's|@prefix@|$(PREFIX)|' \
	    -e 's|@libdir@|$(call pc_path,$(LIBDIR))|' \
	    -e 's|@includedir@|$(call pc_path,$(INCLUDEDIR))|' \
	    -e 's|@version@|$(VERSION)|' \
	    -e "s|@libs_private@|$$(cat '$(NATIVE_STATIC_LIBS)')|" \
	    lockffi/lockffi.pc.in > '$(DESTDIR)$(PKGCONFIGDIR)/lockffi.pc'
	chmod 0644 '$(DESTDIR)$(PKGCONFIGDIR)/lockffi.pc'
	$(INSTALL) -d '$(DESTDIR)$(BINDIR)'
	$(INSTALL) -m 0755 '$(RELEASE)/lockctl' '$(DESTDIR)$(BINDIR)/lockctl'
ifneq ($(MAN_PAGES),)
	for page in $(MAN_PAGES); do \
	    dir='$(DESTDIR)$(MANDIR)'/man$${page##*.}; \
	    $(INSTALL) -d "$$dir" && $(INSTALL) -m 0644 "$$page" "$$dir" || exit 1; \
	done
endif
	$(refresh_loader_cache)

uninstall:
	$(need_version)
	rm -f '$(DESTDIR)$(LIBDIR)/$(LIBRARY)' '$(DESTDIR)$(LIBDIR)/$(SONAME)' '$(DESTDIR)$(LIBDIR)/liblockffi.so' \
	    '$(DESTDIR)$(LIBDIR)/liblockffi.a' '$(DESTDIR)$(PKGCONFIGDIR)/lockffi.pc' \
	    $(foreach header,$(notdir $(HEADERS)),'$(DESTDIR)$(INCLUDEDIR)/$(header)')
	rm -f '$(DESTDIR)$(BINDIR)/lockctl'
ifneq ($(MAN_PAGES),)
	for page in $(MAN_PAGES); do \
	    rm -f '$(DESTDIR)$(MANDIR)'/man$${page##*.}/$${page##*/} || exit 1; \
	done
endif
	$(refresh_loader_cache)

refresh_loader_cache = $(if $(LDCONFIG),@if [ -z '$(DESTDIR)' ] && [ "$$(id -u)" = 0 ]; then \
                           echo '$(LDCONFIG)'; $(LDCONFIG); fi)

help:
	@echo 'make [target] [VARIABLE=value ...]'
	@echo
	@echo 'Targets:'
	@echo '  all        the default: build the release liblockffi.so, liblockffi.a and lockctl'
	@echo '  install    build (or, where cargo cannot run, take what make built), then install:'
	@echo '               LIBDIR: $(LIBRARY) (SONAME $(SONAME)), the links $(SONAME) and'
	@echo '                 liblockffi.so, liblockffi.a (without debug info)'
	@echo '               INCLUDEDIR: include/*.h    PKGCONFIGDIR: lockffi.pc    BINDIR: lockctl'
	@echo '               MANDIR: man/*.N into manN'
	@echo '  uninstall  remove what install installs'
	@echo '  help       this text'
	@echo
	@echo 'Variables, with their values now:'
	@echo '  PREFIX=$(PREFIX)'
	@echo '  BINDIR=$(BINDIR)'
	@echo '  LIBDIR=$(LIBDIR)'
	@echo '  INCLUDEDIR=$(INCLUDEDIR)'
	@echo '  MANDIR=$(MANDIR)'
	@echo '  PKGCONFIGDIR=$(PKGCONFIGDIR)'
	@echo '  DESTDIR=$(DESTDIR)    (a staging root put before every directory above; not in lockffi.pc)'
	@echo '  CARGO=$(CARGO)    CARGO_FLAGS=$(CARGO_FLAGS)    (e.g. --locked, --offline)'
	@echo '  CARGO_TARGET_DIR=$(CARGO_TARGET_DIR)'
	@echo '  INSTALL=$(INSTALL)    STRIP=$(STRIP)'
	@echo '  LDCONFIG=$(LDCONFIG)    (run after install and uninstall by root without DESTDIR; empty: never)'
