"""Where a script's statements begin and end, inside procedure bodies and script blocks too.

A script is cut at its semicolons (and T-SQL `GO` lines, MySQL `DELIMITER`s), except where a
procedure, function or trigger, a `BEGIN ... END` script block, a Postgres `DO` or Snowflake
`EXECUTE IMMEDIATE` holds statements of its own: there the body, written inline or as a
string (`AS $$ ... $$`, `AS '...'`), is searched for the statements that move data (INSERT,
UPDATE, MERGE, SELECT, CREATE ... AS, WITH ...) and control flow around them (IF, WHILE,
LOOP, TRY/CATCH, DECLARE, SET, RETURN...) is skipped. The routine's parameters and declared
variables are named on each statement, since they are not columns. A body in a language
other than SQL, and SQL a body runs through EXEC or CALL, are gaps: what they do is not seen.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from sqlglot import Token, TokenType
from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.tsql import TSQL
from sqlglot.errors import TokenError
from sqlglot.tokens import Tokenizer

from erasure.lineage.sql.gaps import SqlGap
from erasure.model import GapKind


@dataclass(frozen=True, slots=True)
class Span:
    """One statement: `source[start:end]` from `line` on, or why it cannot be read."""

    source: str
    start: int
    end: int
    line: int
    variables: frozenset[str] = frozenset()
    gap: SqlGap | None = None  # set: no statement here, only this gap


def tokenize(source: str, dialect: Dialect) -> list[Token]:
    """The tokens of `source`, with no keyword turning the rest of a statement into text.

    sqlglot reads some keywords at the start of a statement as commands and keeps the rest
    of the statement as one string (BigQuery's BEGIN, Postgres' DO, T-SQL's END); a body
    must be read token by token, so this tokenizer knows no commands.
    """
    return _command_free(dialect.tokenizer_class)(dialect=dialect).tokenize(source)


@cache
def _command_free(base: type[Tokenizer]) -> type[Tokenizer]:
    return type(f"{base.__name__}WithoutCommands", (base,), {"COMMANDS": set()})


def statement_spans(tokens: Sequence[Token], source: str, dialect: Dialect) -> Iterator[Span]:
    """The statements of a script, in order, with those inside bodies in their place."""
    reader = _Reader(tokens, source, dialect)
    yield from reader.script()


# Words that start a statement that may move data.
_DATA_STARTS = frozenset(
    {"INSERT", "UPDATE", "DELETE", "MERGE", "SELECT", "WITH", "CREATE", "REPLACE", "UPSERT"}
)

# Words that end a data statement written without a semicolon, at depth 0 outside CASE.
_CONTROL_ENDS = frozenset(
    {
        "ELSE",
        "ELSEIF",
        "ELSIF",
        "BEGIN",
        "DECLARE",
        "RETURN",
        "PRINT",
        "GO",
        "RAISE",
        "RAISERROR",
        "THROW",
        "COMMIT",
        "ROLLBACK",
        "LEAVE",
        "EXIT",
        "ITERATE",
        "CONTINUE",
        "BREAK",
        "LOOP",
        "WHILE",
        "EXCEPTION",
        "EXEC",
        "EXECUTE",
        "CALL",
        "OPEN",
        "CLOSE",
        "DEALLOCATE",
        "LET",
        "PERFORM",
    }
)
# Words after which a BEGIN opens a block of statements rather than a transaction.
_BLOCK_FIRST_WORDS = _DATA_STARTS | _CONTROL_ENDS | {"IF", "SET", "FOR", "TRY", "CATCH"}
# Words after which a new control statement may start without a semicolon.
_BLOCK_WORDS = frozenset({"END", "BEGIN", "ELSE", "THEN", "LOOP", "DO", "TRY", "CATCH"})
# END followed by one of these closes a construct that was not counted as opened.
_END_OF_UNCOUNTED = frozenset({"IF", "LOOP", "WHILE", "REPEAT", "FOR"})
_VARIABLE_FROM_QUERY = SqlGap(
    "sets a variable from a query: values passed on through variables are not traced",
    GapKind.UNRESOLVED_COLUMN,
)
_ROUTINES = frozenset({"PROCEDURE", "PROC", "FUNCTION", "TRIGGER"})
_ROUTINE_MODIFIERS = frozenset(
    {
        "OR",
        "REPLACE",
        "ALTER",
        "TEMP",
        "TEMPORARY",
        "SECURE",
        "DEFINER",
        "AGGREGATE",
        "TABLE",
        "CONSTRAINT",
        "EDITIONABLE",
        "NONEDITIONABLE",
    }
)
_SQL_LANGUAGES = frozenset({"SQL", "PLPGSQL", "TSQL", "PLSQL"})
_STRING_TOKENS = frozenset(
    {TokenType.STRING, TokenType.HEREDOC_STRING, TokenType.RAW_STRING, TokenType.NATIONAL_STRING}
)
_DECLARATION_STARTS = frozenset({"DECLARE", "CURSOR", "PRAGMA", "TYPE", "SUBTYPE"})
_PARAMETER_MODES = frozenset({"IN", "OUT", "INOUT", "VARIADIC", "OUTPUT", "READONLY"})


def _word(token: Token) -> str:
    return token.text.upper() if token.token_type not in _STRING_TOKENS else ""


class _Reader:
    """Walks one token list (a script, or a string body) and yields its statements."""

    def __init__(
        self, tokens: Sequence[Token], source: str, dialect: Dialect, first_line: int = 1
    ) -> None:
        self.tokens = tokens
        self.source = source
        self.dialect = dialect
        self.first_line = first_line  # the source's first line in the script
        self.tsql = isinstance(dialect, TSQL)
        self.delimiter = ";"
        self.declared: set[str] = set()  # a script's top-level DECLAREs, for its blocks

    # - the script level: statements cut at semicolons, routines and blocks read whole

    def script(self) -> Iterator[Span]:
        at = 0
        while at < len(self.tokens):
            token = self.tokens[at]
            if token.token_type == TokenType.SEMICOLON or self._go_line(at) or self._lone_slash(at):
                at += 1
                continue
            if _word(token) == "DELIMITER":
                at = self._delimiter(at)
                continue
            skip = self._at_delimiter(at)
            if skip:
                at = skip
                continue
            routine = self._routine(at)
            if routine is not None:
                spans, at = routine
                yield from spans
                continue
            block = self._block(at)
            if block is not None:
                spans, at = block
                yield from spans
                continue
            end = self._statement_end(at)
            if _word(token) == "DECLARE":
                self.declared |= _declared_names(self.tokens, at, end)
            yield self._span(at, end)
            at = end

    def _statement_end(self, at: int) -> int:
        """Past the last token of the ordinary statement starting at `at`."""
        end = at
        while end < len(self.tokens):
            if self.tokens[end].token_type == TokenType.SEMICOLON and self.delimiter == ";":
                break
            if end > at and (self._go_line(end) or self._at_delimiter(end)):
                break
            end += 1
        return end

    def _go_line(self, at: int) -> bool:
        """T-SQL's batch separator: GO alone on its line."""
        if not self.tsql or _word(self.tokens[at]) != "GO":
            return False
        line = self.tokens[at].line
        before = at == 0 or self.tokens[at - 1].line != line
        after = at + 1 == len(self.tokens) or self.tokens[at + 1].line != line
        return before and after

    def _lone_slash(self, at: int) -> bool:
        if at >= len(self.tokens) or self.tokens[at].token_type != TokenType.SLASH:
            return False
        line = self.tokens[at].line
        before = at == 0 or self.tokens[at - 1].line != line
        after = at + 1 == len(self.tokens) or self.tokens[at + 1].line != line
        return before and after

    def _delimiter(self, at: int) -> int:
        """MySQL's `DELIMITER //`: statements end at `//` until `DELIMITER ;`."""
        line = self.tokens[at].line
        end = at + 1
        while end < len(self.tokens) and self.tokens[end].line == line:
            end += 1
        rest = self.source[self.tokens[at].end + 1 : self.tokens[end - 1].end + 1]
        self.delimiter = rest.strip() or ";"
        return end

    def _at_delimiter(self, at: int) -> int:
        """Past a custom delimiter starting at token `at`; 0 when there is none."""
        if self.delimiter == ";":
            return 0
        start = self.tokens[at].start
        if not self.source.startswith(self.delimiter, start):
            return 0
        end = at
        while end < len(self.tokens) and self.tokens[end].start < start + len(self.delimiter):
            end += 1
        return end

    # - routines: CREATE [OR REPLACE|ALTER] PROCEDURE|FUNCTION|TRIGGER ... AS body

    def _routine_kind(self, at: int) -> int | None:
        """Where PROCEDURE/FUNCTION/TRIGGER stands in `CREATE [OR REPLACE] ... PROCEDURE`."""
        head = _word(self.tokens[at])
        if head not in ("CREATE", "ALTER"):
            return None
        i = at + 1
        while i < len(self.tokens):
            word = _word(self.tokens[i])
            if word in _ROUTINES:
                return i
            if head == "ALTER" or word not in _ROUTINE_MODIFIERS:
                return None
            if word == "DEFINER":  # MySQL `DEFINER = user@host`
                i += 1
                while i < len(self.tokens) and _word(self.tokens[i]) not in _ROUTINES:
                    if i > at + 12:
                        return None
                    i += 1
                continue
            i += 1
        return None

    def _routine(self, at: int) -> tuple[list[Span], int] | None:
        """The statements of the routine defined at `at`, and where the definition ends."""
        kind_at = self._routine_kind(at)
        if kind_at is None:
            return None
        names = set[str]()
        depth = 0
        language = ""
        at_body = None
        for i in range(kind_at + 1, len(self.tokens)):
            token, word = self.tokens[i], _word(self.tokens[i])
            if token.token_type == TokenType.L_PAREN:
                depth += 1
                if depth == 1:
                    names |= _parameter_names(self.tokens, i)
            elif token.token_type == TokenType.R_PAREN:
                depth -= 1
            elif depth:
                continue
            elif token.token_type == TokenType.SEMICOLON or self._at_delimiter(i):
                return None  # no SQL body: an external routine, or a trigger calling one
            elif word == "LANGUAGE" and i + 1 < len(self.tokens):
                language = _word(self.tokens[i + 1])
            elif word == "AS" and _word(self.tokens[i - 1]) == "EXECUTE":
                continue  # EXECUTE AS OWNER / CALLER
            elif word in ("AS", "IS", "BEGIN") or (
                word == "ROW"
                and i + 1 < len(self.tokens)
                and _word(self.tokens[i + 1]) in _DATA_STARTS
            ):
                at_body = i if word == "BEGIN" else i + 1
                break
        if at_body is None or at_body >= len(self.tokens):
            return None
        body = self.tokens[at_body]
        kind = _word(self.tokens[kind_at])
        if body.token_type in _STRING_TOKENS:
            end = self._statement_end(at_body)
            language = language or self._language(at_body, end)
        elif _word(body) == "BEGIN" or self._declarations_then_begin(at_body):
            close = self._block_close(at_body)
            end = self._after_end(close)
        else:
            close = end = self._plain_body_end(at_body)
        if language and language not in _SQL_LANGUAGES:
            if kind == "FUNCTION":
                return [], end  # a function in another language is opaque where it is used
            text = f"defines a {kind.lower()} in LANGUAGE {language.lower()}, not analysed"
            return [self._gap(at, SqlGap(text, GapKind.UNRESOLVED_COLUMN))], end
        if body.token_type in _STRING_TOKENS:
            return self._string_body(body, names), end
        return self._body(at_body, close, names), end

    def _language(self, start: int, end: int) -> str:
        for i in range(start, end - 1):
            if _word(self.tokens[i]) == "LANGUAGE":
                return _word(self.tokens[i + 1])
        return ""

    def _declarations_then_begin(self, at: int) -> bool:
        """Oracle's `AS v NUMBER := 0; BEGIN`, a `DECLARE ... BEGIN`: declarations, a block."""
        first = self.tokens[at]
        if self.tsql or not (
            first.token_type == TokenType.VAR or _word(first) in _DECLARATION_STARTS
        ):
            return False
        previous = ""
        for i in range(at, len(self.tokens)):
            word = _word(self.tokens[i])
            if word == "BEGIN":
                return True
            cursor_query = previous in ("IS", "FOR") and word in ("SELECT", "WITH")
            if (word in _DATA_STARTS and not cursor_query) or word in ("ALTER", "DROP"):
                return False  # a statement: these were no declarations
            previous = word
        return False

    def _plain_body_end(self, at: int) -> int:
        """A body without BEGIN: to the end of the batch in T-SQL, else one statement."""
        if not self.tsql:
            return self._statement_end(at)
        end = at
        while end < len(self.tokens) and not self._go_line(end):
            end += 1
        return end

    # - blocks: BEGIN ... END, DO $$ ... $$, EXECUTE IMMEDIATE $$ ... $$

    def _block(self, at: int) -> tuple[list[Span], int] | None:
        word = _word(self.tokens[at])
        following = self.tokens[at + 1] if at + 1 < len(self.tokens) else None
        if following is None:
            return None
        if (word == "BEGIN" and _word(following) in _BLOCK_FIRST_WORDS) or (
            word == "DECLARE" and self._declarations_then_begin(at)
        ):
            close = self._block_close(at)
            return self._body(at, close, set(self.declared)), self._after_end(close)
        if word == "DO":
            end = self._statement_end(at)
            strings = [t for t in self.tokens[at + 1 : end] if t.token_type in _STRING_TOKENS]
            language = self._language(at, end)
            if strings and language and language not in _SQL_LANGUAGES:
                gap = SqlGap(
                    f"runs a DO block in LANGUAGE {language.lower()}", GapKind.UNRESOLVED_COLUMN
                )
                return [self._gap(at, gap)], end
            if strings:
                return self._string_body(strings[0], set(self.declared)), end
        if (
            word == "EXECUTE"
            and _word(following) == "IMMEDIATE"
            and at + 2 < len(self.tokens)
            and self.tokens[at + 2].token_type in _STRING_TOKENS
        ):
            body = self._string_body(self.tokens[at + 2], set(self.declared))
            return body, self._statement_end(at)
        return None

    def _block_close(self, at: int) -> int:
        """The END closing the first BEGIN from `at` on (the last token when it is never closed).

        CASE ... END and blocks nested inside are counted; END IF / END LOOP close constructs
        that were not.
        """
        depth = 0
        begun = False
        for i in range(at, len(self.tokens)):
            word = _word(self.tokens[i])
            following = _word(self.tokens[i + 1]) if i + 1 < len(self.tokens) else ""
            if word == "BEGIN" and following not in ("TRAN", "TRANSACTION", "DISTRIBUTED", "WORK"):
                depth += 1
                begun = True
            elif word == "CASE":
                depth += 1
            elif word == "END" and following not in _END_OF_UNCOUNTED:
                depth -= 1
                if depth == 0 and begun:
                    return i
        return len(self.tokens) - 1

    def _after_end(self, close: int) -> int:
        """Past `END [name] [;] [/]` that closes a body."""
        at = close + 1
        if (
            at < len(self.tokens)
            and self.tokens[at].token_type == TokenType.VAR
            and self.tokens[at].line == self.tokens[close].line
            and not self._go_line(at)
        ):
            at += 1  # Oracle's `END proc_name;`
        if at < len(self.tokens) and self.tokens[at].token_type == TokenType.SEMICOLON:
            at += 1
        if self._lone_slash(at):
            at += 1  # SQL*Plus runs the block at a `/` alone on its line
        return at

    # - bodies

    def _string_body(self, token: Token, names: set[str]) -> list[Span]:
        text = token.text
        try:
            tokens = tokenize(text, self.dialect)
        except TokenError:
            line = self.first_line + token.line - 1
            gap = SqlGap("has a body that could not be read", GapKind.UNRESOLVED_COLUMN)
            return [Span(text, 0, 0, line, gap=gap)]
        inner = _Reader(tokens, text, self.dialect, self.first_line + token.line - 1)
        return inner._body(0, len(tokens), names)

    def _body(self, start: int, end: int, names: set[str]) -> list[Span]:
        """The data statements in tokens [start, end), each naming the body's variables."""
        if start >= end:
            return []
        spans: list[Span] = []
        found = set(names)
        in_declarations = _word(self.tokens[start]) not in _DATA_STARTS | {"BEGIN"}
        control = ""  # the first word of the control statement being skipped
        at = start
        while at < end:
            token, word = self.tokens[at], _word(self.tokens[at])
            if token.token_type == TokenType.SEMICOLON:
                control = ""
                at += 1
                continue
            if self._starts_data(at, end):
                stop = self._data_end(at, end)
                spans.append(self._span(at, stop))
                control = ""
                at = stop
                continue
            if not control or word in _CONTROL_ENDS or word in ("IF", "SET"):
                control = word or "?"
                found |= self._names_at(at, end, word, in_declarations)
                in_declarations = in_declarations and word != "BEGIN"
                block = self._block(at) if word == "EXECUTE" else None
                if block is not None:
                    spans.extend(block[0])
                    at = block[1]
                    continue
                if word in ("EXEC", "EXECUTE", "CALL"):
                    gap = SqlGap(
                        f"runs {word}: what it runs is not traced", GapKind.UNRESOLVED_COLUMN
                    )
                    spans.append(self._gap(at, gap))
            if token.token_type == TokenType.L_PAREN:
                close = _matching_paren(self.tokens, at, end)
                first = _word(self.tokens[at + 1]) if at + 1 < close else ""
                if first in ("SELECT", "WITH") and control == "RETURN":
                    spans.append(self._span(at + 1, close))  # an inline table function
                elif first in ("SELECT", "WITH") and control in ("SET", "LET"):
                    spans.append(self._gap(at, _VARIABLE_FROM_QUERY))
                at = close + 1
                continue
            if word in _BLOCK_WORDS:
                control = ""  # a new statement may follow a block word
            at += 1
        variables = frozenset(found)
        return [Span(s.source, s.start, s.end, s.line, variables, s.gap) for s in spans]

    def _starts_data(self, at: int, end: int) -> bool:
        word = _word(self.tokens[at])
        if word == "REPLACE":  # MySQL REPLACE INTO; otherwise the function
            return at + 1 < end and _word(self.tokens[at + 1]) == "INTO"
        return word in _DATA_STARTS

    def _names_at(self, at: int, end: int, word: str, in_declarations: bool) -> set[str]:
        """Variables a control statement declares or assigns."""
        token = self.tokens[at]
        following = self.tokens[at + 1] if at + 1 < end else None
        if word == "DECLARE":
            return _declared_names(self.tokens, at, self._control_end(at, end))
        if word in ("SET", "LET"):
            if following is not None and following.token_type == TokenType.VAR:
                return {following.text.lower()}
            return set()
        if token.token_type != TokenType.VAR:
            return set()
        if following is not None and following.token_type == TokenType.COLON_EQ:
            return {token.text.lower()}  # v := ...
        if in_declarations and word not in _BLOCK_FIRST_WORDS:
            return {token.text.lower()}  # Oracle's and PL/pgSQL's declaration sections
        return set()

    def _control_end(self, at: int, end: int) -> int:
        stop = at
        while stop < end and self.tokens[stop].token_type != TokenType.SEMICOLON:
            stop += 1
        return stop

    def _data_end(self, at: int, end: int) -> int:
        """Past the last token of the data statement starting at `at`, within [at, end)."""
        statement = _DataStatement(_word(self.tokens[at]))
        depth = 0
        stop = at + 1
        while stop < end:
            kind = self.tokens[stop].token_type
            if kind == TokenType.L_PAREN:
                depth += 1
            elif kind == TokenType.R_PAREN:
                depth -= 1
                if depth < 0:
                    break
            elif depth == 0 and (
                kind == TokenType.SEMICOLON
                or self._at_delimiter(stop)
                or statement.ends_at(self.tokens, stop, end)
            ):
                break
            stop += 1
        return stop

    # - spans

    def _span(self, start: int, end: int) -> Span:
        first, last = self.tokens[start], self.tokens[max(start, end - 1)]
        return Span(self.source, first.start, last.end + 1, self.first_line + first.line - 1)

    def _gap(self, at: int, gap: SqlGap) -> Span:
        token = self.tokens[at]
        line = self.first_line + token.line - 1
        return Span(self.source, token.start, token.start, line, gap=gap)


@dataclass
class _DataStatement:
    """What a data statement has read so far, to tell where one without `;` ends."""

    kind: str  # its first word
    main: str = ""  # INSERT/UPDATE/...: for WITH, the statement the CTEs serve
    has_query: bool = False  # its SELECT (or VALUES) has begun
    cases: int = 0  # open CASE expressions, whose END and ELSE are their own
    set_seen: bool = False
    previous: str = ""

    def __post_init__(self) -> None:
        self.main = "" if self.kind == "WITH" else self.kind
        self.has_query = self.kind == "SELECT"

    def ends_at(self, tokens: Sequence[Token], at: int, end: int) -> bool:
        """Whether the word at `at` (depth 0) starts something else."""
        word = _word(tokens[at])
        ends = self._ends(word, tokens, at, end)
        self.previous = word
        return ends

    def _ends(self, word: str, tokens: Sequence[Token], at: int, end: int) -> bool:
        if word == "CASE":
            self.cases += 1
            return False
        if word == "END":
            if not self.cases:
                return True
            self.cases -= 1
            return False
        if self.cases:
            return False
        if word in _CONTROL_ENDS or (word in ("WHEN", "THEN") and self.main != "MERGE"):
            return True
        if word == "IF":  # a function IF(...), or IF [NOT] EXISTS in DDL; else control flow
            call = at + 1 < end and tokens[at + 1].token_type == TokenType.L_PAREN
            return not call and self.previous not in ("TABLE", "VIEW", "SCHEMA", "INDEX")
        if word == "SET":
            return not self._owns_set()
        if word in ("INSERT", "UPDATE", "DELETE", "MERGE"):
            if not self.main:
                self.main = word
                return False
            # MERGE's actions; INSERT ... ON DUPLICATE KEY UPDATE / ON CONFLICT DO UPDATE
            return self.main != "MERGE" and self.previous not in ("KEY", "DO")
        if word in ("SELECT", "VALUES"):
            return not self._owns_query(word)
        return False

    def _owns_set(self) -> bool:
        if self.main == "UPDATE" and not self.set_seen:
            self.set_seen = True
            return True
        return self.main == "MERGE" or (self.main == "INSERT" and self.previous == "UPDATE")

    def _owns_query(self, word: str) -> bool:
        if self.previous in ("UNION", "INTERSECT", "EXCEPT", "MINUS", "ALL", "DISTINCT"):
            return True
        if not self.main:
            self.main, self.has_query = "SELECT", True
            return True
        if self.main in ("INSERT", "CREATE", "REPLACE", "UPSERT") and not self.has_query:
            self.has_query = True
            return True
        return self.main == "MERGE" and word == "VALUES"


def _matching_paren(tokens: Sequence[Token], at: int, end: int) -> int:
    depth = 0
    for i in range(at, end):
        if tokens[i].token_type == TokenType.L_PAREN:
            depth += 1
        elif tokens[i].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return i
    return end - 1


def _parameter_names(tokens: Sequence[Token], at: int) -> set[str]:
    """Names in a routine's parameter list `(a INT, IN b DATE, ...)` opening at `at`."""
    names = set()
    expecting = True  # the next plain word of this parameter is its name
    depth = 0
    for token in tokens[at + 1 :]:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and token.token_type == TokenType.COMMA:
            expecting = True
        elif depth == 0 and expecting and _word(token) not in _PARAMETER_MODES:
            if token.token_type == TokenType.VAR:
                names.add(token.text.lower())
            expecting = False
    return names


def _declared_names(tokens: Sequence[Token], start: int, end: int) -> set[str]:
    """`DECLARE a, b INT64` / `DECLARE x INT DEFAULT 0` / `DECLARE v int := 5`: a, b, x, v."""
    names = set()
    expecting = True
    depth = 0
    for token in tokens[start + 1 : end]:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and token.token_type == TokenType.COMMA:
            expecting = True
        elif depth == 0 and expecting:
            if token.token_type == TokenType.VAR:
                names.add(token.text.lower())
            expecting = False
    return names
