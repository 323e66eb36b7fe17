"""IPsec Testbed: reproduce published IPsec performance experiments on one Linux machine."""
from pathlib import Path

from setuptools import setup

setup(
    name="ipsec-testbed",
    version="0.1.0",
    description="Emulated IPsec testbed: namespaces, kernel xfrm over netlink, tc shaping, "
                "packet-size sweeps; runs in User-Mode Linux when the host kernel has no ESP.",
    long_description=Path("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.11",
    packages=["testbed", "testbed.backends", "ipsec", "ipsec.xfrm", "topologies", "analysis", "experiments",
              "experiments.catalogue", "experiments.engine", "cli", "benchmarks"],
    # read at run time through importlib.resources: the seeds' reference numbers
    package_data={"analysis": ["reference/*.json", "reference/README.md"]},
    # Lower bounds are the versions the test suite has run against.
    install_requires=[
        "pyroute2>=0.9.7",
        "mininet>=2.3.0.dev6",  # PyPI has only pre-releases; mnexec comes from Debian's package
        "scapy>=2.8.0",
        "cryptography>=50.0",  # scapy's ESP/AH ciphers (wire verification)
        "numpy>=2.4",
        "plotly>=7.1",
        "rich>=15.0",
    ],
    # pyyaml: the example CI workflow's test; ruff: the linter .ci/run runs (rules in ruff.toml)
    extras_require={"test": ["pytest>=9.2", "pyyaml>=6.0", "ruff>=0.17,<0.18"]},
    entry_points={"console_scripts": ["ipsec-testbed = cli.main:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Operating System :: POSIX :: Linux",
        "Topic :: System :: Networking",
        "Topic :: Security :: Cryptography",
    ],
)
