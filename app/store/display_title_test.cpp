// display_title(): what the library shows for a PDF's title (display_title.h).
#include "app/store/display_title.h"

#include <gtest/gtest.h>

namespace spw::app {
namespace {

TEST(DisplayTitle, OfficeProgramPrefixesAndExtensionsGo) {
  EXPECT_EQ(display_title("Microsoft Word - Lease_Agreement_2024.docx", "/d/x.pdf"),
            "Lease Agreement 2024");
  EXPECT_EQ(display_title("Microsoft Word - NDA final.doc", "/d/x.pdf"), "NDA final");
  EXPECT_EQ(display_title("Microsoft PowerPoint \xE2\x80\x93 Q3 Board Deck.pptx", "/d/x.pdf"),
            "Q3 Board Deck");
  EXPECT_EQ(display_title("microsoft excel - Budget.XLSX", "/d/x.pdf"), "Budget");
  // Not a program prefix: a title about the program stays.
  EXPECT_EQ(display_title("Microsoft Word documents explained", "/d/x.pdf"),
            "Microsoft Word documents explained");
}

TEST(DisplayTitle, APathKeepsItsFileNameAndARealTitleIsUntouched) {
  EXPECT_EQ(display_title("C:\\Users\\kim\\Desktop\\NDA final.doc", "/d/x.pdf"), "NDA final");
  EXPECT_EQ(display_title("/home/kim/contracts/msa_v2.odt", "/d/x.pdf"), "msa v2");
  EXPECT_EQ(display_title("Master Services Agreement", "/d/x.pdf"), "Master Services Agreement");
  EXPECT_EQ(display_title("Q1/Q2 results", "/d/x.pdf"), "Q1/Q2 results");
  EXPECT_EQ(display_title("  Annual\t Report \xC2\xA0 2024 ", "/d/x.pdf"), "Annual Report 2024");
  EXPECT_EQ(display_title("Version 2.1 notes", "/d/x.pdf"), "Version 2.1 notes");
  // Underscores inside a title with spaces are the author's.
  EXPECT_EQ(display_title("The __init__ method in depth", "/d/x.pdf"),
            "The __init__ method in depth");
}

TEST(DisplayTitle, PlaceholdersAndEmptyTitlesUseTheFileName) {
  EXPECT_EQ(display_title("", "/srv/docs/q3_report.pdf"), "q3 report");
  EXPECT_EQ(display_title("Untitled", "/srv/docs/Lease 2024.pdf"), "Lease 2024");
  EXPECT_EQ(display_title("Document1", "/srv/docs/lease.pdf"), "lease");
  EXPECT_EQ(display_title("untitled-3", "/srv/docs/lease.pdf"), "lease");
  EXPECT_EQ(display_title("PowerPoint Presentation", "/srv/docs/deck.pdf"), "deck");
  EXPECT_EQ(display_title("Slide 1", "/srv/docs/deck.pdf"), "deck");
  EXPECT_EQ(display_title("Book1", "/srv/docs/sheet.pdf"), "sheet");
  EXPECT_EQ(display_title("---", "/srv/docs/x_y.pdf"), "x y");
  EXPECT_EQ(display_title("Microsoft Word - Document1", "/srv/docs/nda.pdf"), "nda");
  EXPECT_EQ(display_title("Microsoft Word - ", "/srv/docs/nda.pdf"), "nda");
  // A word that merely starts like a placeholder is a title.
  EXPECT_EQ(display_title("Documentation of the merger", "/d/x.pdf"),
            "Documentation of the merger");
  EXPECT_EQ(display_title("Slides 2024", "/d/x.pdf"), "Slides 2024");
  // Nothing at all to go on.
  EXPECT_EQ(display_title("", ""), "Untitled document");
}

}  // namespace
}  // namespace spw::app
