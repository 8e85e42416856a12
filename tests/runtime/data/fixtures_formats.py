"""Builders of small files in the real upstream formats (wndb, org.Hs.eg.db, PyKEEN wheel, .deb)."""

from __future__ import annotations

import io
import sqlite3
import tarfile
import zipfile
from pathlib import Path

LICENCE = "  1 This software and database is being provided to you, the LICENSEE, by\n"


def wndb_line(
    offset: str, lex: int, pos: str, words: list[str], pointers: list[tuple[str, str, str]], gloss: str
) -> str:
    w = " ".join(f"{word} 0" for word in words)
    p = " ".join(f"{sym} {off} {tpos} 0000" for sym, off, tpos in pointers)
    return f"{offset} {lex:02d} {pos} {len(words):02x} {w} {len(pointers):03d} {p} | {gloss}\n"


def write_wordnet(root: Path) -> None:
    """4 noun synsets, 1 verb, 1 adjective with a satellite pointer; glosses share words."""
    root.mkdir(parents=True, exist_ok=True)
    noun = [
        wndb_line(
            "00000001",
            3,
            "n",
            ["entity"],
            [("~", "00000002", "n"), ("~", "00000003", "n")],
            "a thing that is",
        ),
        wndb_line("00000002", 3, "n", ["object"], [("@", "00000001", "n")], "a thing you can see"),
        wndb_line(
            "00000003",
            5,
            "n",
            ["idea"],
            [("@", "00000001", "n"), ("+", "00000010", "v")],
            "a thing you think",
        ),
        wndb_line("00000004", 5, "n", ["dream"], [("@", "00000003", "n")], "what you see in sleep"),
    ]
    (root / "data.noun").write_text(LICENCE + "".join(noun))
    (root / "data.verb").write_text(
        LICENCE + wndb_line("00000010", 31, "v", ["think"], [("+", "00000003", "n")], "you think a thing")
    )
    (root / "data.adj").write_text(
        LICENCE + wndb_line("00000020", 0, "s", ["big"], [("&", "00000020", "s")], "a big thing")
    )
    (root / "data.adv").write_text(LICENCE)


def write_org_sqlite(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(
        """
        create table genes (_id integer primary key, gene_id varchar(10) not null unique);
        create table pubmed (_id integer not null, pubmed_id varchar(10) not null);
        create table go_bp (_id integer, go_id char(10), evidence char(3));
        create table go_mf (_id integer, go_id char(10), evidence char(3));
        create table go_cc (_id integer, go_id char(10), evidence char(3));
        create table pfam (_id integer, ipi_id char(11), pfam_id char(7));
        create table prosite (_id integer, ipi_id char(11), prosite_id char(7));
        create table omim (_id integer, omim_id char(6));
        create table ec (_id integer, ec_number varchar(13));
        create table kegg (_id integer, path_id char(5));
        insert into genes values (1, '7157'), (2, '672'), (3, '1');
        insert into pubmed values (1, '100'), (1, '200'), (2, '200'), (3, '300');
        insert into go_bp values (1, 'GO:0000001', 'IEA'), (1, 'GO:0000001', 'TAS'), (2, 'GO:0000002', 'IEA');
        insert into pfam values (1, 'IPI1', 'PF00001'), (2, 'IPI2', NULL);
        insert into omim values (3, '191170');
        insert into kegg values (1, '04115');
        """
    )
    db.commit()
    db.close()


def write_go_sqlite(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(
        """
        create table go_term (_id integer primary key, go_id char(10), term varchar(255),
                              ontology varchar(9));
        create table go_bp_parents (_id integer, _parent_id integer, relationship_type varchar(7));
        create table go_mf_parents (_id integer, _parent_id integer, relationship_type varchar(7));
        create table go_cc_parents (_id integer, _parent_id integer, relationship_type varchar(7));
        insert into go_term values (1, 'GO:0000001', 'a', 'BP'), (2, 'GO:0000002', 'b', 'BP');
        insert into go_bp_parents values (1, 2, 'isa'), (2, 1, 'part of');
        """
    )
    db.commit()
    db.close()


def write_pykeen_wheel(path: Path, name: str = "nations") -> None:
    splits = {
        "train": "usa\tally\tuk\nuk\tally\tusa\nchina\ttrade\tusa\n",
        "valid": "usa\ttrade\tchina\n",
        "test": "uk\ttrade\tchina\n",
    }
    with zipfile.ZipFile(path, "w") as z:
        for split, text in splits.items():
            z.writestr(f"pykeen/datasets/{name}/{split}.txt", text)


def build_deb(path: Path, files: dict[str, bytes]) -> None:
    """A minimal but real Debian package: ar archive with debian-binary, control.tar.xz, data.tar.xz."""

    def tar_xz(members: dict[str, bytes]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:xz") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(f"./{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    members = [
        ("debian-binary", b"2.0\n"),
        ("control.tar.xz", tar_xz({"control": b"Package: fake\n"})),
        ("data.tar.xz", tar_xz(files)),
    ]
    out = bytearray(b"!<arch>\n")
    for name, data in members:
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        out += data
        if len(data) % 2:
            out += b"\n"
    path.write_bytes(bytes(out))
