# Sourced by the scripts that fetch Debian packages through a private apt state (its own
# sources list, lists and cache under target/), so that the machine's apt configuration and
# dpkg architectures are never touched.

# Sets $codename (this machine's Debian release), $mirror (the mirror its apt already uses for
# that release's main) and $keyring (Debian's archive keyring, empty where it is missing).
# Without both a release and a mirror it says so, with `$1` appended (what to do instead), and
# fails.
debian_main_mirror() {
    # shellcheck disable=SC1091
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(IDENTIFIER)' 2>/dev/null |
        awk -v c="$codename" '$2 == c && $3 == "main" && $4 == "Packages" { print $1; exit }')
    if [ -z "$codename" ] || [ -z "$mirror" ]; then
        echo "error: no Debian '${codename:-?} main' apt source configured here$1" >&2
        return 1
    fi
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -f "$keyring" ] || keyring=""
}

# Sets the array $private_apt_opts: apt-get options that keep every file of apt's state in the
# directory `$1` (its sources.list there, its own lists and cache).
private_apt_options() {
    private_apt_opts=(
        -q -o "Dir::Etc::SourceList=$1/sources.list" -o "Dir::Etc::SourceParts=$1/none"
        -o "Dir::State::Lists=$1/lists" -o "Dir::Cache=$1/cache" -o "APT::Sandbox::User=root"
    )
}
