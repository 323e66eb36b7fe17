"""The regression gate's verdicts written out: JUnit XML for CI test reports, Markdown for a job summary."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from xml.etree import ElementTree as ET

from analysis.regress import Verdict


def junit_xml(verdicts: Sequence[Verdict], max_drop: float, confidence: float, warnings: Iterable[str] = ()) -> str:
    """JUnit XML: one test case per point and metric, a failure for each regression."""
    failures = sum(v.regressed for v in verdicts)
    suite = ET.Element("testsuite", name="ipsec-testbed regress", tests=str(len(verdicts)),
                       failures=str(failures), errors="0", skipped="0")
    props = ET.SubElement(suite, "properties")
    for name, value in (("max_drop", f"{max_drop:g}"), ("confidence", f"{confidence:g}")):
        ET.SubElement(props, "property", name=name, value=value)
    for w in warnings:
        ET.SubElement(props, "property", name="warning", value=w)
    for v in verdicts:
        case = ET.SubElement(suite, "testcase", classname=v.label, name=v.name)
        detail = (f"{v.label} {v.current.mean:.3f} {v.unit} vs baseline {v.baseline.mean:.3f} {v.unit}: "
                  f"ratio {v.ratio:.4f}, {confidence:.0%} {'upper' if v.better > 0 else 'lower'} bound "
                  f"{v.bound:.4f} (limit {v.limit(max_drop):.4f})")
        if v.regressed:
            ET.SubElement(case, "failure", message=v.worse(max_drop)).text = detail
        else:
            ET.SubElement(case, "system-out").text = detail
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def markdown(verdicts: Sequence[Verdict], max_drop: float, confidence: float, warnings: Sequence[str] = ()) -> str:
    """A Markdown summary (for a CI job summary, e.g. ``$GITHUB_STEP_SUMMARY``)."""
    regressed = [v for v in verdicts if v.regressed]
    head = (f"**{len(regressed)} of {len(verdicts)} points regressed**" if regressed
            else f"**No regression** in {len(verdicts)} points")
    lines = ["## IPsec Testbed regression gate", "",
             f"{head} (a point regresses when, at {confidence:.0%} confidence, its goodput fell or its CPU cost "
             f"rose by more than {max_drop * 100:g}%).", ""]
    lines += [f"> **Warning:** {w}" for w in warnings]
    if warnings:
        lines.append("")
    lines += ["| point | metric | baseline | now | now/baseline | bound (worse side) | verdict |",
              "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for v in verdicts:
        lines.append(f"| {v.name} | {v.label} ({v.unit}) | {v.baseline.mean:.2f} ± {v.baseline.ci95 or 0:.2f} | "
                     f"{v.current.mean:.2f} ± {v.current.ci95 or 0:.2f} | {v.ratio:.3f} | {v.bound:.3f} | "
                     f"{'**REGRESSED**' if v.regressed else 'ok'} |")
    return "\n".join(lines) + "\n"
