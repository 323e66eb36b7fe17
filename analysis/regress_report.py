"""The regression gate's verdicts written out: JUnit XML for CI test reports, Markdown for a job summary."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from xml.etree import ElementTree as ET

from analysis.regress import Verdict


def junit_xml(verdicts: Sequence[Verdict], max_drop: float, confidence: float, warnings: Iterable[str] = ()) -> str:
    """JUnit XML: one test case per point, a failure for each regression."""
    failures = sum(v.regressed for v in verdicts)
    suite = ET.Element("testsuite", name="ipsec-testbed regress", tests=str(len(verdicts)),
                       failures=str(failures), errors="0", skipped="0")
    props = ET.SubElement(suite, "properties")
    for name, value in (("max_drop", f"{max_drop:g}"), ("confidence", f"{confidence:g}")):
        ET.SubElement(props, "property", name=name, value=value)
    for w in warnings:
        ET.SubElement(props, "property", name="warning", value=w)
    for v in verdicts:
        case = ET.SubElement(suite, "testcase", classname="goodput", name=v.name)
        detail = (f"goodput {v.current.mean:.3f} Mbit/s vs baseline {v.baseline.mean:.3f} Mbit/s: "
                  f"ratio {v.ratio:.4f}, {confidence:.0%} upper bound {v.upper:.4f} "
                  f"(limit {1 - max_drop:.4f})")
        if v.regressed:
            ET.SubElement(case, "failure", message=f"goodput fell by more than {max_drop:.0%}").text = detail
        else:
            ET.SubElement(case, "system-out").text = detail
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def markdown(verdicts: Sequence[Verdict], max_drop: float, confidence: float, warnings: Sequence[str] = ()) -> str:
    """A Markdown summary (for a CI job summary, e.g. ``$GITHUB_STEP_SUMMARY``)."""
    regressed = [v for v in verdicts if v.regressed]
    head = (f"**{len(regressed)} of {len(verdicts)} points regressed**" if regressed
            else f"**No regression** in {len(verdicts)} points")
    lines = ["## IPsec Testbed regression gate", "",
             f"{head} (a point regresses when, at {confidence:.0%} confidence, its goodput fell by more than "
             f"{max_drop:.0%}).", ""]
    lines += [f"> **Warning:** {w}" for w in warnings]
    if warnings:
        lines.append("")
    lines += ["| point | baseline Mbit/s | now Mbit/s | now/baseline | upper bound | verdict |",
              "| --- | ---: | ---: | ---: | ---: | --- |"]
    for v in verdicts:
        lines.append(f"| {v.name} | {v.baseline.mean:.2f} ± {v.baseline.ci95 or 0:.2f} | "
                     f"{v.current.mean:.2f} ± {v.current.ci95 or 0:.2f} | {v.ratio:.3f} | {v.upper:.3f} | "
                     f"{'**REGRESSED**' if v.regressed else 'ok'} |")
    return "\n".join(lines) + "\n"
