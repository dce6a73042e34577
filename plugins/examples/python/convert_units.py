"""Example maestro tool plugin in Python: `ConvertUnits`.

Converts a quantity between units of length, mass, volume, temperature, time,
speed, area and digital storage. Unit names are often ambiguous ("gallon" is
US or imperial, "ton" is metric, short or long) and a silent guess is a wrong
answer, so when the arguments leave a unit open the tool parks with `ask` and
lets the user pick; the resumed call reads the answer and converts.

Built into a component with componentize-py (see `build.sh`); the bindings in
`wit_world` are generated from the WIT contract at build time.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host
from wit_world.imports.types import (
    Call,
    Outcome,
    Outcome_Output,
    Outcome_Park,
    Outcome_Terminal,
    Park_Ask,
    Resume,
    Resume_Answered,
    Resume_Approved,
    Resume_Denied,
    Resume_Expired,
    Resume_LoggedIn,
    Resume_SubtasksDone,
    Terminal_Abort,
    ToolError,
    ToolSpec,
)

TOOL = "ConvertUnits"
DEFAULT_PRECISION = 6


@dataclass(frozen=True)
class Unit:
    """One unit: `base = value * factor + offset` in its dimension's base unit.

    The offset exists only for temperatures, whose scales do not share a zero.
    """

    id: str
    name: str
    dimension: str
    factor: float
    aliases: tuple[str, ...]
    offset: float = 0.0

    def to_base(self, value: float) -> float:
        return value * self.factor + self.offset

    def from_base(self, base: float) -> float:
        return (base - self.offset) / self.factor


_F = 5.0 / 9.0

# Base units: metre, kilogram, litre, kelvin, second, metre per second,
# square metre, byte. Factors are the exact legal definitions where one exists.
# fmt: off
UNITS: tuple[Unit, ...] = (
    # length
    Unit("metre", "metre", "length", 1.0, ("m", "meter", "meters", "metre", "metres")),
    Unit("kilometre", "kilometre", "length", 1000.0, ("km", "kilometer", "kilometers", "kilometre", "kilometres")),
    Unit("centimetre", "centimetre", "length", 0.01, ("cm", "centimeter", "centimeters", "centimetre", "centimetres")),
    Unit("millimetre", "millimetre", "length", 0.001, ("mm", "millimeter", "millimeters", "millimetre", "millimetres")),
    Unit("inch", "inch", "length", 0.0254, ("in", "inch", "inches", '"')),
    Unit("foot", "foot", "length", 0.3048, ("ft", "foot", "feet", "'")),
    Unit("yard", "yard", "length", 0.9144, ("yd", "yard", "yards")),
    Unit("mile", "mile (statute)", "length", 1609.344, ("mi", "mile", "miles", "statute mile")),
    Unit("nautical_mile", "nautical mile", "length", 1852.0, ("nmi", "nautical mile", "nautical miles", "mile", "miles")),
    # mass
    Unit("kilogram", "kilogram", "mass", 1.0, ("kg", "kilo", "kilos", "kilogram", "kilograms")),
    Unit("gram", "gram", "mass", 0.001, ("g", "gram", "grams")),
    Unit("milligram", "milligram", "mass", 1e-6, ("mg", "milligram", "milligrams")),
    Unit("tonne", "metric tonne", "mass", 1000.0, ("t", "tonne", "tonnes", "metric ton", "ton", "tons")),
    Unit("short_ton", "short ton (US)", "mass", 907.18474, ("short ton", "short tons", "ton", "tons")),
    Unit("long_ton", "long ton (UK)", "mass", 1016.0469088, ("long ton", "long tons", "ton", "tons")),
    Unit("pound", "pound", "mass", 0.45359237, ("lb", "lbs", "pound", "pounds")),
    Unit("ounce", "ounce (mass)", "mass", 0.028349523125, ("oz", "ounce", "ounces")),
    Unit("stone", "stone", "mass", 6.35029318, ("st", "stone", "stones")),
    # volume
    Unit("litre", "litre", "volume", 1.0, ("l", "L", "liter", "liters", "litre", "litres")),
    Unit("millilitre", "millilitre", "volume", 0.001, ("ml", "mL", "milliliter", "milliliters", "millilitre", "millilitres")),
    Unit("cubic_metre", "cubic metre", "volume", 1000.0, ("m3", "m^3", "cubic meter", "cubic meters", "cubic metre", "cubic metres")),
    Unit("us_gallon", "US gallon", "volume", 3.785411784, ("gal", "gallon", "gallons", "us gal", "us gallon", "us gallons")),
    Unit("imperial_gallon", "imperial gallon", "volume", 4.54609, ("gal", "gallon", "gallons", "imp gal", "imperial gallon", "imperial gallons")),
    Unit("us_pint", "US pint", "volume", 0.473176473, ("pt", "pint", "pints", "us pint", "us pints")),
    Unit("imperial_pint", "imperial pint", "volume", 0.56826125, ("pt", "pint", "pints", "imperial pint", "imperial pints")),
    Unit("us_cup", "US cup", "volume", 0.2365882365, ("cup", "cups", "us cup", "us cups")),
    Unit("metric_cup", "metric cup", "volume", 0.25, ("cup", "cups", "metric cup", "metric cups")),
    Unit("us_fluid_ounce", "US fluid ounce", "volume", 0.0295735295625, ("fl oz", "fluid ounce", "fluid ounces", "us fl oz", "oz", "ounce", "ounces")),
    Unit("imperial_fluid_ounce", "imperial fluid ounce", "volume", 0.0284130625, ("fl oz", "fluid ounce", "fluid ounces", "imp fl oz", "oz", "ounce", "ounces")),
    # temperature (base: kelvin)
    Unit("celsius", "degree Celsius", "temperature", 1.0, ("c", "°c", "celsius", "degc", "degree celsius", "degrees celsius"), 273.15),
    Unit("fahrenheit", "degree Fahrenheit", "temperature", _F, ("f", "°f", "fahrenheit", "degf", "degree fahrenheit", "degrees fahrenheit"), 273.15 - 32.0 * _F),
    Unit("kelvin", "kelvin", "temperature", 1.0, ("k", "kelvin", "kelvins")),
    Unit("rankine", "degree Rankine", "temperature", _F, ("r", "°r", "rankine")),
    # time
    Unit("second", "second", "time", 1.0, ("s", "sec", "secs", "second", "seconds")),
    Unit("minute", "minute", "time", 60.0, ("min", "mins", "minute", "minutes", "m")),
    Unit("hour", "hour", "time", 3600.0, ("h", "hr", "hrs", "hour", "hours")),
    Unit("day", "day", "time", 86400.0, ("d", "day", "days")),
    Unit("week", "week", "time", 604800.0, ("wk", "week", "weeks")),
    # speed
    Unit("metre_per_second", "metre per second", "speed", 1.0, ("m/s", "mps", "meters per second", "metres per second")),
    Unit("kilometre_per_hour", "kilometre per hour", "speed", 1000.0 / 3600.0, ("km/h", "kph", "kmh", "kilometers per hour", "kilometres per hour")),
    Unit("mile_per_hour", "mile per hour", "speed", 1609.344 / 3600.0, ("mph", "mi/h", "miles per hour")),
    Unit("knot", "knot", "speed", 1852.0 / 3600.0, ("kn", "kt", "knot", "knots")),
    # area
    Unit("square_metre", "square metre", "area", 1.0, ("m2", "m^2", "sq m", "square meter", "square meters", "square metre", "square metres")),
    Unit("square_foot", "square foot", "area", 0.09290304, ("ft2", "ft^2", "sq ft", "square foot", "square feet")),
    Unit("hectare", "hectare", "area", 10000.0, ("ha", "hectare", "hectares")),
    Unit("acre", "acre", "area", 4046.8564224, ("ac", "acre", "acres")),
    # digital storage (base: byte)
    Unit("byte", "byte", "data", 1.0, ("B", "byte", "bytes")),
    Unit("kilobyte", "kilobyte (1000 B)", "data", 1e3, ("kB", "KB", "kilobyte", "kilobytes")),
    Unit("megabyte", "megabyte (10^6 B)", "data", 1e6, ("MB", "megabyte", "megabytes")),
    Unit("gigabyte", "gigabyte (10^9 B)", "data", 1e9, ("GB", "gigabyte", "gigabytes")),
    Unit("terabyte", "terabyte (10^12 B)", "data", 1e12, ("TB", "terabyte", "terabytes")),
    Unit("kibibyte", "kibibyte (1024 B)", "data", 1024.0, ("KiB", "kibibyte", "kibibytes")),
    Unit("mebibyte", "mebibyte (2^20 B)", "data", 1024.0**2, ("MiB", "mebibyte", "mebibytes")),
    Unit("gibibyte", "gibibyte (2^30 B)", "data", 1024.0**3, ("GiB", "gibibyte", "gibibytes")),
    Unit("tebibyte", "tebibyte (2^40 B)", "data", 1024.0**4, ("TiB", "tebibyte", "tebibytes")),
)

# fmt: on

BY_ID: dict[str, Unit] = {u.id: u for u in UNITS}


def _alias_index() -> dict[str, list[Unit]]:
    """Lower-cased alias (and id) -> every unit it may mean; >1 is ambiguous."""
    index: dict[str, list[Unit]] = {}
    for unit in UNITS:
        for key in {unit.id, unit.name.lower(), *(a.lower() for a in unit.aliases)}:
            index.setdefault(key, []).append(unit)
    return index


ALIASES = _alias_index()


def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip()).replace("degrees ", "degree ")


def candidates(text: str) -> list[Unit]:
    """Every unit `text` may name: one when clear, several when ambiguous,
    none when unknown."""
    text = _normalize(text)
    if text in BY_ID:
        return [BY_ID[text]]
    lower = text.lower()
    found = ALIASES.get(lower)
    if found is None and lower.endswith("s"):
        found = ALIASES.get(lower[:-1])
    return list(found or [])


def suggestions(text: str, dimensions: set[str]) -> list[Unit]:
    """Units to offer for an unknown name: close spellings first, else every
    unit of the dimensions the other side may have (all when it is unknown too)."""
    close = difflib.get_close_matches(_normalize(text).lower(), list(ALIASES), n=6, cutoff=0.6)
    units: list[Unit] = []
    for key in close:
        for unit in ALIASES[key]:
            if unit not in units and (not dimensions or unit.dimension in dimensions):
                units.append(unit)
    if not units:
        units = [u for u in UNITS if not dimensions or u.dimension in dimensions]
    return units


@dataclass
class Side:
    """One end of the conversion (`from` or `to`) and what it may mean."""

    label: str
    text: str
    options: list[Unit]
    known: bool  # False: `options` are suggestions for an unknown name

    @property
    def unit(self) -> Unit | None:
        return self.options[0] if self.known and len(self.options) == 1 else None


def sides(src: str, dst: str) -> tuple[Side, Side]:
    """Look both units up and let each side narrow the other: in "5 m to ft"
    the "m" cannot be a minute."""
    a, b = candidates(src), candidates(dst)
    if not a and not b:
        # Nothing to anchor a question on; the caller should fix the call.
        raise Err(
            ToolError(
                f"neither {src!r} nor {dst!r} is a unit ConvertUnits knows; it converts "
                + ", ".join(sorted({u.dimension for u in UNITS}))
                + " units, named by symbol (km, lb, °F), name (US gallon) or id (us_gallon)",
                False,
            )
        )
    if a and b:
        shared = {u.dimension for u in a} & {u.dimension for u in b}
        if not shared:
            raise Err(
                ToolError(
                    f"cannot convert {src!r} ({_dims(a)}) to {dst!r} ({_dims(b)}): "
                    "they measure different things",
                    False,
                )
            )
        a = [u for u in a if u.dimension in shared]
        b = [u for u in b if u.dimension in shared]
    return (
        Side("from", src, a or suggestions(src, {u.dimension for u in b}), bool(a)),
        Side("to", dst, b or suggestions(dst, {u.dimension for u in a}), bool(b)),
    )


def _dims(units: list[Unit]) -> str:
    return " or ".join(sorted({u.dimension for u in units}))


def numbered(open_sides: list[Side]) -> list[tuple[int, Side, Unit]]:
    """Options of the open sides numbered 1..n across both sides, so the
    same arguments always give the same numbers (the resumed call recomputes
    them; nothing survives between calls)."""
    out: list[tuple[int, Side, Unit]] = []
    for side in open_sides:
        for unit in side.options:
            out.append((len(out) + 1, side, unit))
    return out


def question(value: float, src: str, dst: str, open_sides: list[Side], retry_of: str | None) -> str:
    """The `ask` text: one numbered list per open side, so a short answer
    ("2", "1 and 4") or a unit's name both work."""
    choices = numbered(open_sides)
    lines: list[str] = []
    if retry_of is not None:
        lines.append(
            f"I could not match your answer {retry_of!r} to exactly one unit for each question below."
        )
    plural = "s" if len(open_sides) > 1 else ""
    lines.append(f"To convert {value:g} {src} to {dst} I need to know which unit{plural} you mean.")
    for side in open_sides:
        kind = "could mean" if side.known else "is not a unit I know; did you mean"
        lines.append(f"The {side.label} unit {side.text!r} {kind}:")
        lines.extend(f"  {n}. {u.name} [{u.id}]" for n, s, u in choices if s is side)
    example = " and ".join(str(next(n for n, s, _ in choices if s is side)) for side in open_sides)
    lines.append(
        f'Reply with the number{" of each choice" if plural else ""} or the unit\'s name, e.g. "{example}".'
    )
    return "\n".join(lines)


def _keys(unit: Unit) -> set[str]:
    """The ways an answer may name `unit`: its id, with or without
    underscores, and its name with or without the parenthesised note."""
    name = unit.name.lower()
    return {unit.id, unit.id.replace("_", " "), name, re.sub(r"\s*\(.*\)", "", name)}


def pick(answer: str, open_sides: list[Side], other: Unit | None) -> dict[str, Unit] | None:
    """Read the user's answer: numbers from the question, unit ids or names
    among the options, or (for a single open side) any unit of the right
    dimension. None when some open side is not matched by exactly one unit."""
    choices = numbered(open_sides)
    numbers = {int(n) for n in re.findall(r"\b\d+\b", answer)}
    lower = _normalize(answer).lower()
    chosen: dict[str, Unit] = {}
    for side in open_sides:
        hits = [
            u
            for n, s, u in choices
            if s is side
            and (
                n in numbers
                or any(re.search(rf"(?<!\w){re.escape(k)}(?!\w)", lower) for k in _keys(u))
            )
        ]
        if len(hits) != 1 and len(open_sides) == 1:
            hits = [
                u for u in candidates(answer) if other is None or u.dimension == other.dimension
            ]
        if len(hits) != 1:
            return None
        chosen[side.label] = hits[0]
    return chosen


def convert(value: float, src: Unit, dst: Unit, precision: int) -> str:
    """The tool's output: JSON the model can read a number from, plus a
    sentence it can quote. The result keeps 12 significant digits so float
    noise (212.00000000000003) does not reach the model."""
    if src.dimension != dst.dimension:
        raise Err(
            ToolError(
                f"cannot convert {src.name} ({src.dimension}) to {dst.name} ({dst.dimension})",
                False,
            )
        )
    result = float(f"{dst.from_base(src.to_base(value)):.12g}")
    return json.dumps(
        {
            "value": value,
            "from": src.id,
            "to": dst.id,
            "result": result,
            "text": f"{value:.{precision}g} {src.name} = {result:.{precision}g} {dst.name}",
        }
    )


def parse_args(call: Call) -> tuple[float, str, str, int]:
    """The host validated `arguments` against the schema; this only turns the
    JSON into typed values (and guards against a host that did not)."""
    try:
        args: dict[str, Any] = json.loads(call.arguments)
        value = float(args["value"])
        src, dst = str(args["from"]), str(args["to"])
        precision = int(args.get("precision", DEFAULT_PRECISION))
    except (ValueError, KeyError, TypeError) as e:
        raise Err(ToolError(f"invalid arguments: {e}", False))
    if not 1 <= precision <= 15:
        raise Err(ToolError("precision must be between 1 and 15", False))
    return value, src, dst, precision


def resume_kind(resume: Resume) -> str:
    return {
        Resume_Answered: "answered",
        Resume_Approved: "approved",
        Resume_Denied: "denied",
        Resume_LoggedIn: "logged-in",
        Resume_SubtasksDone: "subtasks-done",
        Resume_Expired: "expired",
    }[type(resume)]


SCHEMA = {
    "type": "object",
    "properties": {
        "value": {"type": "number", "description": "The quantity to convert.", "examples": [5]},
        "from": {
            "type": "string",
            "minLength": 1,
            "description": "The unit of `value`: a symbol (km, lb, °F, GiB), a name (US gallon) or an id.",
            "examples": ["gal", "km"],
        },
        "to": {
            "type": "string",
            "minLength": 1,
            "description": "The unit to convert to.",
            "examples": ["l", "mi"],
        },
        "precision": {
            "type": "integer",
            "minimum": 1,
            "maximum": 15,
            "description": f"Significant digits in `text` (default {DEFAULT_PRECISION}).",
        },
    },
    "required": ["value", "from", "to"],
    "additionalProperties": False,
}


class Tool(exports.Tool):
    """The exported `tool` interface; componentize-py instantiates it per call."""

    def describe(self) -> list[ToolSpec]:
        dims = sorted({u.dimension for u in UNITS})
        return [
            ToolSpec(
                name=TOOL,
                description=(
                    "Convert a quantity from one unit to another (" + ", ".join(dims) + "). "
                    "Returns JSON with `result` (a number) and `text`. If a unit is ambiguous "
                    "(gallon, ton, pint, cup, mile...) or unknown, the user is asked which one "
                    "is meant and the conversion continues with the answer."
                ),
                parameters=json.dumps(SCHEMA),
            )
        ]

    def invoke(self, call: Call) -> Outcome:
        if call.tool != TOOL:
            raise Err(ToolError(f"this plugin has no tool named {call.tool!r}", False))
        value, src, dst, precision = parse_args(call)
        match call.resume:
            case None | Resume_Answered() | Resume_Expired():
                pass
            case unexpected:
                # Only `ask` parks this tool, so only its answers can resume it.
                raise Err(
                    ToolError(f"{TOOL} cannot be resumed with {resume_kind(unexpected)}", False)
                )

        src_side, dst_side = sides(src, dst)
        open_sides = [s for s in (src_side, dst_side) if s.unit is None]
        if not open_sides:
            assert src_side.unit is not None and dst_side.unit is not None
            return Outcome_Output(convert(value, src_side.unit, dst_side.unit, precision))

        match call.resume:
            case Resume_Answered(value=answer):
                other = src_side.unit or dst_side.unit
                chosen = pick(answer, open_sides, other)
                if chosen is None:
                    # Ask again rather than guess: a wrong unit is a wrong answer.
                    return Outcome_Park(Park_Ask(question(value, src, dst, open_sides, answer)))
                for label, unit in chosen.items():
                    host.log(host.LogLevel.INFO, f"{label} unit {unit.id} chosen by the user")
                from_unit = chosen.get("from", src_side.unit)
                to_unit = chosen.get("to", dst_side.unit)
                assert from_unit is not None and to_unit is not None
                return Outcome_Output(convert(value, from_unit, to_unit, precision))
            case Resume_Expired():
                names = " and ".join(repr(s.text) for s in open_sides)
                return Outcome_Terminal(
                    Terminal_Abort(
                        f"No one said which unit {names} meant before the question expired; "
                        f"the conversion of {value:g} {src} to {dst} was not done."
                    )
                )
            case _:
                return Outcome_Park(Park_Ask(question(value, src, dst, open_sides, None)))
