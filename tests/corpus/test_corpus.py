"""The corpus builder's parsers and cleaners on small fixtures (tests/corpus/fixtures), without the
Debian documentation packages: each format's extraction, normalisation, junk filtering,
deduplication, the deterministic split, and the chat data's helpers."""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures")
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "corpus"))
import chats  # noqa: E402
import sources  # noqa: E402
import textclean  # noqa: E402


def fixture(name, mode="r"):
    with open(os.path.join(FIX, name), mode) as f:
        return f.read()


class Normalisation(unittest.TestCase):
    def test_normalize_spaces_newlines_controls_and_nfc(self):
        raw = "  Cafe\u0301\u00a0 au  lait\t\r\n\r\n\r\n\nnext\x07 line   \n\n"
        self.assertEqual(textclean.normalize(raw), "  Café au lait\n\nnext line")

    def test_reflow_joins_wrapped_lines_but_keeps_numbered_senses(self):
        text = "A tower with\n   a light.\n\n1. First\n   sense.\n2. Second."
        self.assertEqual(textclean.reflow(text), "A tower with a light.\n\n1. First sense.\n2. Second.")

    def test_junk_paragraphs_are_dropped(self):
        text = "Real words make a real paragraph of text here.\n\n" + "| -- | ++ | 12 | 34 | == | ## | ** | 56 | 78 |\n\nok"
        self.assertEqual(textclean.drop_junk_paragraphs(text),
                         "Real words make a real paragraph of text here.\n\nok")


class DedupAndSplit(unittest.TestCase):
    def test_exact_and_near_exact_documents_are_dropped(self):
        d = textclean.Deduper()
        self.assertIsNotNone(d.add("The cat sat on the mat."))
        self.assertIsNone(d.add("The cat sat on the mat."))
        self.assertIsNone(d.add("the CAT sat, on the mat!"))
        self.assertIsNotNone(d.add("The dog sat on the mat."))

    def test_repeated_long_paragraphs_are_removed_inside_later_documents(self):
        boiler = "Report bugs to the maintainers of this package through the usual bug tracking system please."
        d = textclean.Deduper()
        self.assertEqual(d.add("First page.\n\n" + boiler), "First page.\n\n" + boiler)
        self.assertEqual(d.add("Second page.\n\n" + boiler), "Second page.")

    def test_split_is_deterministic_by_id_and_about_the_asked_share(self):
        ids = [f"doc:{i}" for i in range(20000)]
        first = [textclean.is_validation(i, 15) for i in ids]
        self.assertEqual(first, [textclean.is_validation(i, 15) for i in ids])
        self.assertTrue(200 < sum(first) < 400, sum(first))  # 1.5% of 20000 = 300
        self.assertFalse(textclean.is_validation("doc:1", 0))


class Formats(unittest.TestCase):
    def test_html_page_to_text(self):
        text = textclean.html_to_text(fixture("page.html"), sources.HTML_SKIP)
        self.assertEqual(text, "os — Miscellaneous operating system interfaces\n\n"
                               "This module provides a portable way of using operating system dependent "
                               "functionality & more.\n\n- Open a file.\n\n- Read it\n\n"
                               "for name in os.listdir(\".\"):\n    print(name)\n\nCafé <b>")

    def test_man_page_rendered_and_sectioned(self):
        rendered = sources.render_man(fixture("tiny.1", "rb"))
        text = sources.man_page_text(rendered)
        self.assertTrue(text.startswith("NAME\n\ntiny - print a tiny greeting\n\nSYNOPSIS\n\ntiny [OPTION]..."), text)
        self.assertIn("DESCRIPTION\n\ntiny prints a greeting to standard output. It is a very small program, "
                      "written to show how manual pages are rendered into plain text.", text)
        self.assertIn("-l, --loud\n       shout the greeting.\n\nSEE ALSO\n\necho(1)", text)
        self.assertTrue(text.endswith("echo(1)"), text)  # the running footer is gone
        self.assertIsNone(sources.render_man(b".so man1/other.1\n"))
        name, desc = chats.man_name_and_description(text)
        self.assertEqual(name, "tiny - print a tiny greeting")
        self.assertTrue(desc.startswith("tiny prints a greeting"))

    def test_dictd_index_and_gcide_cleaning(self):
        entries = sources.dictd_entries(fixture("tiny.index"), fixture("tiny.dict", "rb"))
        self.assertEqual([(off, head) for off, head, _ in entries], [(0, "Lighthouse"), (220, "Caf")])
        light = sources.clean_gcide(entries[0][2].decode())
        self.assertEqual(light, "Lighthouse, n.; pl. Lighthouses. A tower or other building with "
                                "a powerful light at top, erected at the entrance of a port; a pharos.")
        cafe = sources.clean_gcide(entries[1][2].decode())
        self.assertEqual(cafe, "Caf, n.\n1. A coffee house; a restaurant.\n\n2. Coffee.")
        self.assertEqual(sources.dictd_number("Dc"), 3 * 64 + 28)

    def test_dict_entry_cleaning(self):
        raw = "grep\n\n   <tool> A {Unix} command for\n   searching files.\n"
        self.assertEqual(sources.clean_dict_entry(raw), "grep\n\nA Unix command for searching files.")

    def test_wordnet_glosses_and_examples(self):
        synsets = sources.wordnet_synsets(fixture("data.noun"))
        self.assertEqual(len(synsets), 2)
        s = synsets[0]
        self.assertEqual(s["words"], ["lighthouse", "beacon", "beacon light", "pharos"])
        self.assertEqual(s["definition"], "a tower with a light that gives warning of shoals to passing ships")
        self.assertEqual(s["examples"], ["the lighthouse guided the ships"])
        self.assertEqual(synsets[1]["words"], ["abandoned"])
        self.assertEqual(synsets[1]["examples"], ["an abandoned sadness born of grief"])
        self.assertEqual(sources.wordnet_text(s),
                         "lighthouse, beacon, beacon light, pharos (noun): a tower with a light that gives warning "
                         "of shoals to passing ships\nFor example: \"the lighthouse guided the ships\"")

    def test_fortune_cookies(self):
        self.assertEqual(sources.split_fortunes(fixture("cookies")),
                         ["A fortune.", "Two lines\n  -- Someone", "Last one."])

    def test_osis_chapters(self):
        chapters = sources.osis_to_text(fixture("book.osis"))
        self.assertEqual([c for c, _ in chapters], ["Gen.1", "Gen.2"])
        text = textclean.normalize(chapters[0][1])
        self.assertEqual(text, "In the beginning, God created the heavens.\n\nA line of verse,\nand another.")

    def test_mallard_page(self):
        self.assertEqual(sources.mallard_to_text(fixture("topic.page")),
                         "How to back up\n\nThe easiest way of backing up your files is to let a backup "
                         "application do it.\n\n- Open the application.\n\n- Press Back Up.")


class ChatHelpers(unittest.TestCase):
    def test_first_sentences_respects_the_limit(self):
        text = "One sentence. Two sentences here! Three? Four."
        self.assertEqual(chats.first_sentences(text, 20), "One sentence.")
        self.assertEqual(chats.first_sentences(text, 1000), text)
        self.assertEqual(chats.first_sentences("Long " * 50, 10), ("Long " * 50).strip())

    def test_gloss_sentences(self):
        s = sources.wordnet_synsets(fixture("data.noun"))[0]
        self.assertEqual(chats.gloss_sentence("lighthouse", s),
                         "A lighthouse is a tower with a light that gives warning of shoals to passing ships.")
        verb = {"pos": "verb", "definition": "apply paint in small dots"}
        self.assertEqual(chats.gloss_sentence("stipple", verb), "To stipple means to apply paint in small dots.")

    def test_weather_table_is_a_fixed_function_of_the_city(self):
        self.assertEqual(chats.weather_of("Lisbon"), chats.weather_of("Lisbon"))
        temps = {chats.weather_of(c)["temperature_c"] for c in chats.CITIES}
        self.assertTrue(len(temps) > 10 and all(-5 <= t < 35 for t in temps))


if __name__ == "__main__":
    unittest.main()
