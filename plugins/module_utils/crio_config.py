# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CRI-O's configuration as CRI-O itself reads it: which files, in which order, which value wins.

CRI-O (v1.36) reads its main file (``--config``, /etc/crio/crio.conf) and then every regular
file under its drop-in directory (``--config-dir``, /etc/crio/crio.conf.d), walking it in
lexical order and descending into sub-directories where they sort; it does not look at the
file names, so a ``.bak`` or ``.gpuops-original`` copy left there is read too. Each file
overrides the keys it sets, so the last file that sets a key wins; an array such as
``default_ulimits`` is replaced whole.

The functions take the files' text, so they are unit tested without a node. TOML is read
with tomllib (Python 3.11), tomli or pip's vendored tomli when one is there, and otherwise
with :func:`read_toml_values`, a reader of the subset CRI-O's files use (tables, strings,
arrays), enough for the keys looked up here.
"""

from __future__ import annotations

import os
import stat

DEFAULT_CONFIG_FILE = "/etc/crio/crio.conf"
DEFAULT_CONFIG_DIR = "/etc/crio/crio.conf.d"

# The keys this collection reads, as (table path, key).
DEFAULT_ULIMITS = (("crio", "runtime"), "default_ulimits")
PAUSE_IMAGE = (("crio", "image"), "pause_image")
PAUSE_COMMAND = (("crio", "image"), "pause_command")
KEYS = {"default_ulimits": DEFAULT_ULIMITS, "pause_image": PAUSE_IMAGE, "pause_command": PAUSE_COMMAND}


class CrioConfigError(ValueError):
    """A configuration file CRI-O would refuse, or that cannot be read; the message names it."""


def _toml_loader():
    for name in ("tomllib", "tomli", "pip._vendor.tomli"):
        try:
            return __import__(name, fromlist=["loads"])
        except ImportError:
            continue
    return None


# ---------------------------------------------------------------------------
# Which files, in CRI-O's order
# ---------------------------------------------------------------------------


def config_files(main_config, config_dir):
    """The files CRI-O reads, in its order: the main file when it exists, then every file under
    the drop-in directory (lexical order, sub-directories descended where they sort).

    A link is read through (CRI-O does the same); a link to a directory is returned too, so
    that reading it fails as it fails for CRI-O.
    """
    files = []
    if main_config and os.path.exists(main_config):
        files.append(main_config)
    if config_dir and os.path.isdir(config_dir):
        files.extend(_walk(config_dir))
    return files


def _walk(directory):
    found = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode):
            found.extend(_walk(path))
        else:
            found.append(path)
    return found


def read_files(paths):
    """[(path, text)] of the files; a file that cannot be read raises CrioConfigError naming it."""
    documents = []
    for path in paths:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as error:
            raise CrioConfigError("cannot read %s: %s" % (path, error.strerror or error)) from error
        try:
            documents.append((path, data.decode("utf-8")))
        except UnicodeDecodeError as error:
            raise CrioConfigError(
                "%s is not UTF-8 text, so not TOML: CRI-O would not start" % path
            ) from error
    return documents


# ---------------------------------------------------------------------------
# Which value wins
# ---------------------------------------------------------------------------


def values_of(text, keys=None):
    """{name: value} of the keys (name -> (table path, key); KEYS by default) the TOML text sets."""
    keys = KEYS if keys is None else keys
    loader = _toml_loader()
    if loader is not None:
        try:
            document = loader.loads(text)
        except Exception as error:  # each parser has its own error class
            raise CrioConfigError("not valid TOML: %s" % error) from error
        found = {}
        for name, (table_path, key) in keys.items():
            table = document
            for part in table_path:
                table = table.get(part) if isinstance(table, dict) else None
            if isinstance(table, dict) and key in table:
                found[name] = table[key]
        return found
    return read_toml_values(text, keys)


def effective_settings(documents, keys=None):
    """What CRI-O runs with for each key: {name: {"value", "source"}}; source is the last file
    that sets the key ("" and value None when none does). Raises CrioConfigError naming a file
    that is not valid TOML (CRI-O would refuse to start with it)."""
    keys = KEYS if keys is None else keys
    settings = {name: {"value": None, "source": ""} for name in keys}
    for path, text in documents:
        try:
            found = values_of(text, keys)
        except CrioConfigError as error:
            raise CrioConfigError("%s: %s" % (path, error)) from error
        for name, value in found.items():
            settings[name] = {"value": value, "source": path}
    return settings


def read_effective_settings(main_config, config_dir, keys=None):
    """effective_settings of the files CRI-O reads, plus "files": the files in its order."""
    paths = config_files(main_config, config_dir)
    settings = effective_settings(read_files(paths), keys)
    settings["files"] = paths
    return settings


def default_ulimits_entries(setting):
    """The default_ulimits value as a list of strings; CrioConfigError naming its file otherwise."""
    value = setting.get("value")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CrioConfigError(
            "%s: crio.runtime.default_ulimits must be a list of strings, got %r"
            % (setting.get("source"), value)
        )
    return list(value)


# ---------------------------------------------------------------------------
# A reader of the TOML subset CRI-O's files use, for Pythons without a TOML parser
# ---------------------------------------------------------------------------

_BARE_KEY = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


class _Scanner:
    def __init__(self, text):
        self.text = text
        self.pos = 0

    def error(self, message):
        line = self.text.count("\n", 0, self.pos) + 1
        return CrioConfigError("not valid TOML: %s (line %d)" % (message, line))

    def peek(self, count=1):
        return self.text[self.pos : self.pos + count]

    def at_end(self):
        return self.pos >= len(self.text)

    def skip_blanks(self, newlines=False):
        """Spaces, tabs, comments and (with newlines) line ends."""
        while not self.at_end():
            char = self.text[self.pos]
            if char in " \t" or (newlines and char in "\r\n"):
                self.pos += 1
            elif char == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                break

    def end_of_line(self):
        self.skip_blanks()
        if self.at_end():
            return
        if self.peek() not in "\r\n":
            raise self.error("unexpected %r after a value" % self.peek())

    def key_path(self, closing):
        """A dotted key up to (not including) the closing text."""
        parts = []
        while True:
            self.skip_blanks()
            char = self.peek()
            if char in ('"', "'"):
                parts.append(self.string())
            else:
                start = self.pos
                while not self.at_end() and self.text[self.pos] in _BARE_KEY:
                    self.pos += 1
                if start == self.pos:
                    raise self.error("expected a key")
                parts.append(self.text[start : self.pos])
            self.skip_blanks()
            if self.peek() == ".":
                self.pos += 1
                continue
            if self.peek(len(closing)) != closing:
                raise self.error("expected %r after the key" % closing)
            self.pos += len(closing)
            return tuple(parts)

    def string(self):
        quote = self.peek()
        if self.peek(3) == quote * 3:
            return self.multiline_string(quote)
        self.pos += 1
        out = []
        while True:
            if self.at_end() or self.peek() in "\r\n":
                raise self.error("unterminated string")
            char = self.text[self.pos]
            self.pos += 1
            if char == quote:
                return "".join(out)
            if char == "\\" and quote == '"':
                out.append(self.escape())
            else:
                out.append(char)

    def escape(self):
        char = self.peek()
        self.pos += 1
        if char in _ESCAPES:
            return _ESCAPES[char]
        if char in ("u", "U"):
            width = 4 if char == "u" else 8
            digits = self.text[self.pos : self.pos + width]
            try:
                code = int(digits, 16)
            except ValueError:
                raise self.error("bad unicode escape") from None
            self.pos += width
            return chr(code)
        raise self.error("bad escape \\%s" % char)

    def multiline_string(self, quote):
        self.pos += 3
        if self.peek() == "\n":
            self.pos += 1
        elif self.peek(2) == "\r\n":
            self.pos += 2
        out = []
        while True:
            if self.at_end():
                raise self.error("unterminated multi-line string")
            if self.peek(3) == quote * 3:
                self.pos += 3
                return "".join(out)
            char = self.text[self.pos]
            self.pos += 1
            if char == "\\" and quote == '"':
                if self.peek() in " \t\r\n":  # a line-ending backslash joins the lines
                    while not self.at_end() and self.text[self.pos] in " \t\r\n":
                        self.pos += 1
                else:
                    out.append(self.escape())
            else:
                out.append(char)

    def value(self):
        self.skip_blanks()
        char = self.peek()
        if char in ('"', "'"):
            return self.string()
        if char == "[":
            return self.array()
        if char == "{":
            return self.inline_table()
        start = self.pos
        while not self.at_end() and self.text[self.pos] not in ",]}#\r\n":
            self.pos += 1
        word = self.text[start : self.pos].strip()
        if not word:
            raise self.error("expected a value")
        if word == "true":
            return True
        if word == "false":
            return False
        try:
            return int(word.replace("_", ""), 0)
        except ValueError:
            return word  # a float or a date: kept as its text, never looked up here

    def array(self):
        self.pos += 1
        items = []
        while True:
            self.skip_blanks(newlines=True)
            if self.peek() == "]":
                self.pos += 1
                return items
            items.append(self.value())
            self.skip_blanks(newlines=True)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "]":
                raise self.error("expected ',' or ']' in an array")

    def inline_table(self):
        self.pos += 1
        table = {}
        self.skip_blanks()
        if self.peek() == "}":
            self.pos += 1
            return table
        while True:
            key = self.key_path("=")
            _assign(table, key, self.value(), self)
            self.skip_blanks()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() == "}":
                self.pos += 1
                return table
            else:
                raise self.error("expected ',' or '}' in an inline table")


def _assign(table, key, value, scanner):
    for part in key[:-1]:
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            raise scanner.error("key %s is not a table" % ".".join(key))
    if key[-1] in table:
        raise scanner.error("key %s is set twice" % ".".join(key))
    table[key[-1]] = value


def read_toml_values(text, keys=None):
    """{name: value} of the keys the text sets, read with the subset reader (tables, arrays of
    tables, dotted and quoted keys, strings of the four kinds, arrays, inline tables; other
    scalars are kept as text)."""
    keys = KEYS if keys is None else keys
    scanner = _Scanner(text)
    document = {}
    table_path = ()
    while True:
        scanner.skip_blanks(newlines=True)
        if scanner.at_end():
            break
        if scanner.peek(2) == "[[":
            scanner.pos += 2
            table_path = scanner.key_path("]]")
            # Arrays of tables hold nothing looked up here: their keys go to a scratch table.
            table_path = ("[[", *table_path, str(scanner.pos))
        elif scanner.peek() == "[":
            scanner.pos += 1
            table_path = scanner.key_path("]")
        else:
            key = scanner.key_path("=")
            target = document
            for part in table_path:
                target = target.setdefault(part, {})
                if not isinstance(target, dict):
                    raise scanner.error("table %s is also a value" % ".".join(table_path))
            _assign(target, key, scanner.value(), scanner)
        scanner.end_of_line()
    found = {}
    for name, (path, key) in keys.items():
        table = document
        for part in path:
            table = table.get(part) if isinstance(table, dict) else None
        if isinstance(table, dict) and key in table:
            found[name] = table[key]
    return found
