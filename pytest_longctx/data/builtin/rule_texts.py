"""The rules of the rules configs, one table row per rule with its sentence in each
language. Commands, flags and paths stay in English in every language.

``governs`` lists the (action kind, slot) places of a session the rule changes (see
``shell.py``); ``expected`` is what the rule implies at each of them, whose first
token must differ from the one the session actually has there."""
from __future__ import annotations

from dataclasses import dataclass

LANGS = ("en", "cs", "de")


@dataclass(frozen=True)
class Rule:
    id: str
    family: str
    governs: tuple[tuple[str, str], ...]
    expected: str
    en: str
    cs: str
    de: str

    def text(self, lang: str) -> str:
        return getattr(self, lang)


RULES = (
    # substitution: another tool for the same job
    Rule("rg", "substitution", (("search", "start"),), "rg",
         "Search the code with rg, not with grep.",
         "Kód prohledávej pomocí rg, ne pomocí grep.",
         "Durchsuche den Code mit rg, nicht mit grep."),
    Rule("fd", "substitution", (("find", "start"),), "fd",
         "To list files, use fd instead of find.",
         "K vypisování souborů používej fd místo find.",
         "Verwende zum Auflisten von Dateien fd statt find."),
    Rule("bat", "substitution", (("read", "start"),), "bat",
         "Show whole files with bat, never with cat.",
         "Celé soubory zobrazuj pomocí bat, nikdy pomocí cat.",
         "Zeige ganze Dateien mit bat an, niemals mit cat."),
    Rule("uv", "substitution", (("install", "start"),), "uv",
         "Install packages with uv pip install; do not call pip directly.",
         "Balíčky instaluj příkazem uv pip install; pip nevolej přímo.",
         "Installiere Pakete mit uv pip install; rufe pip nicht direkt auf."),
    Rule("pytest", "substitution", (("test", "start"),), "pytest",
         "Run the tests by calling pytest directly rather than python -m pytest.",
         "Testy spouštěj přímým voláním pytest, ne přes python -m pytest.",
         "Starte die Tests direkt mit pytest statt über python -m pytest."),
    Rule("tree", "substitution", (("list", "start"),), "tree",
         "Look at directories with tree -L 1 instead of ls.",
         "Obsah adresářů si prohlížej pomocí tree -L 1 místo ls.",
         "Sieh dir Verzeichnisse mit tree -L 1 statt mit ls an."),
    Rule("nox", "substitution", (("tox", "start"),), "nox",
         "This project has moved from tox to nox: run nox sessions, not tox.",
         "Tento projekt přešel z tox na nox: spouštěj relace nox, ne tox.",
         "Dieses Projekt ist von tox auf nox umgestiegen: starte nox-Sessions, nicht tox."),
    Rule("cloc", "substitution", (("count", "start"),), "cloc",
         "Count lines of code with cloc; wc is not accurate enough here.",
         "Řádky kódu počítej nástrojem cloc; wc tu není dost přesný.",
         "Zähle Codezeilen mit cloc; wc ist hier nicht genau genug."),
    Rule("awk", "substitution", (("view", "start"),), "awk",
         "Print line ranges of files with awk, not with sed.",
         "Rozsahy řádků souborů vypisuj pomocí awk, ne pomocí sed.",
         "Gib Zeilenbereiche von Dateien mit awk aus, nicht mit sed."),
    # redirect: the same action, sent to another place, tool or target
    Rule("fork", "redirect", (("push", "remote"),), "fork",
         "Push branches to the fork remote; you cannot write to origin.",
         "Větve posílej do vzdáleného repozitáře fork; do origin zapisovat nemůžeš.",
         "Pushe Branches auf das Remote fork; auf origin darfst du nicht schreiben."),
    Rule("develop", "redirect", (("diff", "base"),), "develop",
         "Compare your changes against the develop branch, not against main.",
         "Změny porovnávej s větví develop, ne s main.",
         "Vergleiche deine Änderungen mit dem Branch develop, nicht mit main."),
    Rule("logs", "redirect", (("tox", "logpath"),), "logs/",
         "Write log files into the logs/ folder of the repository, never into /tmp.",
         "Logy zapisuj do složky logs/ v repozitáři, nikdy do /tmp.",
         "Schreibe Logdateien in den Ordner logs/ des Repositorys, niemals nach /tmp."),
    Rule("venv", "redirect", (("test", "start"), ("script", "start")), ".venv/bin/python",
         "Run Python only through the project's virtual environment: .venv/bin/python.",
         "Python spouštěj jen z virtuálního prostředí projektu: .venv/bin/python.",
         "Führe Python nur über die virtuelle Umgebung des Projekts aus: .venv/bin/python."),
    Rule("backup", "redirect", (("backup", "dest"),), ".backup/",
         "Keep backup copies in the .backup/ folder of the repository, not in /tmp.",
         "Záložní kopie ukládej do složky .backup/ v repozitáři, ne do /tmp.",
         "Lege Sicherungskopien im Ordner .backup/ des Repositorys ab, nicht in /tmp."),
    Rule("wip", "redirect", (("branch", "name"),), "wip/",
         "Create new branches under the wip/ prefix, for example wip/parser.",
         "Nové větve zakládej s předponou wip/, například wip/parser.",
         "Lege neue Branches mit dem Präfix wip/ an, zum Beispiel wip/parser."),
    # required: a step or flag the rule demands
    Rule("timeout", "required", (("test", "start"),), "timeout",
         "Always prefix test runs with timeout 600 so that a hanging test cannot block the session.",
         "Před každé spuštění testů vždy dej timeout 600, aby zaseknutý test nezablokoval práci.",
         "Stelle Testläufen immer timeout 600 voran, damit ein hängender Test die Sitzung nicht blockiert."),
    Rule("signoff", "required", (("commit", "flag"),), "--signoff",
         "Every commit needs a sign-off: always pass --signoff to git commit.",
         "Každý commit musí být podepsaný: ke git commit vždy přidej --signoff.",
         "Jeder Commit braucht ein Sign-off: gib bei git commit immer --signoff an."),
    Rule("require-virtualenv", "required", (("install", "flag"),), "--require-virtualenv",
         "Always pass --require-virtualenv to pip install.",
         "Příkazu pip install vždy předávej --require-virtualenv.",
         "Übergib pip install immer --require-virtualenv."),
    Rule("color", "required", (("search", "flag"),), "--color=never",
         "Always run grep with --color=never so that the output has no escape codes.",
         "grep vždy spouštěj s --color=never, aby výstup neobsahoval řídicí znaky.",
         "Rufe grep immer mit --color=never auf, damit die Ausgabe keine Steuerzeichen enthält."),
    Rule("exitfirst", "required", (("test", "args"),), "-x",
         "Run pytest with -x so that it stops at the first failure.",
         "pytest spouštěj s přepínačem -x, aby se zastavil u první chyby.",
         "Starte pytest mit -x, damit es beim ersten Fehler abbricht."),
    Rule("upstream", "required", (("push", "remote"),), "--set-upstream",
         "Always push with --set-upstream so that the branch tracks its remote.",
         "Vždy pushuj s --set-upstream, aby větev sledovala svou vzdálenou větev.",
         "Pushe immer mit --set-upstream, damit der Branch seinem Remote folgt."),
    Rule("numbered", "required", (("read", "path"),), "-n",
         "When you print a file with cat, always add -n for line numbers.",
         "Když vypisuješ soubor pomocí cat, vždy přidej -n pro čísla řádků.",
         "Wenn du eine Datei mit cat ausgibst, füge immer -n für Zeilennummern hinzu."),
    Rule("preserve", "required", (("backup", "args"),), "-p",
         "Copy files with cp -p so that their timestamps are kept.",
         "Soubory kopíruj pomocí cp -p, aby se zachovala jejich časová razítka.",
         "Kopiere Dateien mit cp -p, damit ihre Zeitstempel erhalten bleiben."),
)
